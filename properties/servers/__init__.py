"""The servers the project builds and runs for its own tests and measurements: llama.cpp from
its pinned source (:mod:`.llamacpp`), llama-cpp-python's server on the same library
(:mod:`.llamacpp_python`), and the tiny GGUF models they serve (:mod:`.gguf_models`). They import
only the reference, so the engine adapters and the endpoint audit above both use them.
"""
