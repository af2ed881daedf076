"""A small fake of vLLM's OpenAI-compatible server for the ``vllm_server`` engine's contract tests.

It serves the endpoints the engine uses (``/health``, ``/v1/models``, ``/v1/load_lora_adapter``,
``/v1/unload_lora_adapter``, ``/v1/completions``) with vLLM's status codes (a duplicate load → 400, unloading or
using an unknown name → 404), records every call, and answers completions with deterministic tokens and log-probs
(:func:`fake_tokens`, a function of seed, model name and prompt ids). In a thread: ``FakeVLLM().start()``; as a
process (what the engine starts in place of the real server): ``python tests/helpers/fake_vllm_server.py --port P
--served-model-name NAME [--crash-at-start] [--slow-start S] [--spawn-child] [--sigkill-at N --sigkill-once FILE]``;
other vLLM flags are accepted and ignored. ``--sigkill-at N`` makes the process ``SIGKILL`` itself when its N-th
completion request arrives (a real ``kill -9`` mid-step), once: only if ``FILE`` does not exist yet, which it
creates first with its pid, so the server started again in its place serves on.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def fake_tokens(seed, model: str, prompt: list[int], max_tokens: int) -> tuple[list[int], list[float], str]:
    """(token ids, log-probs, finish reason) the fake answers for one completion."""
    rng = random.Random(f"{seed}|{model}|{','.join(map(str, prompt))}")
    n = min(max_tokens, 1 + rng.randrange(max_tokens + 2))
    ids = [rng.randrange(10, 200) for _ in range(n)]
    lps = [-round(0.01 + 3 * rng.random(), 4) for _ in range(n)]
    return ids, lps, "length" if n == max_tokens else "stop"


class FakeVLLM:
    def __init__(self, base_name: str = "fake-base", port: int = 0):
        self.base_name = base_name
        self.loaded: dict[str, str] = {}  # adapter name -> path
        self.calls: list[tuple] = []  # ("load", name, path) / ("unload", name) / ("complete", model)
        self.completions: list[dict] = []  # request bodies
        self.refuse_load: int | None = None  # answer loads with this status
        self.delay = 0.0  # seconds before a completion answers
        self.gate = threading.Event()  # completions wait for it (set = open)
        self.gate.set()
        self.fail_after: int | None = None  # after this many completions, drop connections without an answer
        self.sigkill_at: int | None = None  # at this completion, SIGKILL this process (see main)
        self.sigkill_once: Path | None = None
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread: threading.Thread | None = None

    def start(self) -> "FakeVLLM":
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.gate.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    # ---- the endpoints ------------------------------------------------------------------------------------------
    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _send(self, code: int, body) -> None:
                data = (body if isinstance(body, str) else json.dumps(body)).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json" if not isinstance(body, str) else "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _error(self, code: int, message: str) -> None:
                kind = {400: "BadRequestError", 404: "NotFoundError"}.get(code, "InternalServerError")
                self._send(code, {"error": {"message": message, "type": kind, "param": None, "code": code}})

            def do_GET(self):
                if self.path == "/health":
                    return self._send(200, "")
                if self.path == "/v1/models":
                    data = [{"id": fake.base_name, "object": "model", "root": f"/models/{fake.base_name}",
                             "parent": None}]
                    data += [{"id": n, "object": "model", "root": p, "parent": fake.base_name}
                             for n, p in fake.loaded.items()]
                    return self._send(200, {"object": "list", "data": data})
                self._error(404, "Not Found")

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if self.path == "/v1/load_lora_adapter":
                    return self._load(body)
                if self.path == "/v1/unload_lora_adapter":
                    return self._unload(body)
                if self.path == "/v1/completions":
                    return self._complete(body)
                self._error(404, "Not Found")

            def _load(self, body):
                name, path = body.get("lora_name"), body.get("lora_path")
                with fake.lock:
                    fake.calls.append(("load", name, path))
                    if fake.refuse_load:
                        return self._error(fake.refuse_load, f"cannot load '{name}':\nrefused by the test")
                    if name in fake.loaded:
                        return self._error(400, f"The lora adapter '{name}' has already been loaded. If you want "
                                                f"to load the adapter in place, set 'load_inplace' to True.")
                    if not (Path(path) / "adapter_config.json").exists():
                        return self._error(404, f"Loading lora {name} failed: No adapter found for {path}")
                    fake.loaded[name] = path
                self._send(200, f"Success: LoRA adapter '{name}' added successfully.")

            def _unload(self, body):
                name = body.get("lora_name")
                with fake.lock:
                    fake.calls.append(("unload", name))
                    if name not in fake.loaded:
                        return self._error(404, f"The lora adapter '{name}' cannot be found.")
                    del fake.loaded[name]
                self._send(200, f"Success: LoRA adapter '{name}' removed successfully.")

            def _complete(self, body):
                model, prompt = body.get("model"), body.get("prompt")
                with fake.lock:
                    fake.calls.append(("complete", model))
                    fake.completions.append(body)
                    count = len(fake.completions)
                if count == fake.sigkill_at and fake.sigkill_once and not fake.sigkill_once.exists():
                    fake.sigkill_once.write_text(str(os.getpid()))
                    os.kill(os.getpid(), signal.SIGKILL)
                if fake.fail_after is not None and count > fake.fail_after:
                    self.close_connection = True  # a crash: the connection drops without an answer
                    return
                if model != fake.base_name and model not in fake.loaded:
                    return self._error(404, f"The model `{model}` does not exist.")
                if not (isinstance(prompt, list) and all(isinstance(t, int) for t in prompt)):
                    return self._error(400, "the fake wants token-id prompts")
                fake.gate.wait()
                time.sleep(fake.delay)
                ids, lps, reason = fake_tokens(body.get("seed"), model, prompt, body.get("max_tokens", 16))
                choice = {"index": 0, "text": " ".join(f"w{t}" for t in ids), "finish_reason": reason,
                          "logprobs": {"token_logprobs": lps, "tokens": [f"w{t}" for t in ids],
                                       "top_logprobs": [{f"w{t}": lp} for t, lp in zip(ids, lps)],
                                       "text_offset": list(range(len(ids)))} if body.get("logprobs") is not None
                          else None}
                if body.get("return_token_ids"):
                    choice["token_ids"], choice["prompt_token_ids"] = ids, prompt
                self._send(200, {"id": "cmpl-fake", "object": "text_completion", "model": model,
                                 "choices": [choice], "usage": {"prompt_tokens": len(prompt),
                                                                "completion_tokens": len(ids)}})

        return Handler


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--served-model-name", default="fake-base")
    parser.add_argument("--crash-at-start", action="store_true")
    parser.add_argument("--slow-start", type=float, default=0.0)
    parser.add_argument("--spawn-child", action="store_true", help="start a worker process, as vLLM does")
    parser.add_argument("--sigkill-at", type=int, default=None)
    parser.add_argument("--sigkill-once", type=Path, default=None)
    args, _ = parser.parse_known_args(argv)
    print(f"fake vLLM server: {args.served_model_name} on port {args.port}", flush=True)
    if args.spawn_child:
        import subprocess

        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        print(f"worker pid {child.pid}", flush=True)
    if args.crash_at_start:
        print("RuntimeError: Unsupported CPU attention configuration", flush=True)
        sys.exit(3)
    time.sleep(args.slow_start)
    fake = FakeVLLM(args.served_model_name, args.port)
    fake.sigkill_at, fake.sigkill_once = args.sigkill_at, args.sigkill_once
    fake.httpd.serve_forever()


if __name__ == "__main__":
    main()
