"""Episode programs shared by a training recipe and an inference setup: :mod:`selfevo.protocols.maestro` (the
MAESTRO rounds) runs under ``selfevo run maestro`` (:mod:`selfevo.algorithms.maestro`) and ``selfevo eval
setup=maestro_select`` (:mod:`selfevo.setups.maestro`). A protocol builds on the interaction runner and the roles;
recipes and setups build on it."""
