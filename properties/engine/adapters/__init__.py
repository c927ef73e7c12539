"""Third-party generate loops as engines of the engine audit: HF transformers' assisted
generation and prompt lookup (:mod:`.hf`), vLLM's offline ``LLM`` (:mod:`.vllm`) and SGLang's
``Engine`` (:mod:`.sglang`), each available where its package is installed. Importing a module
here imports none of those packages; building an engine does.
"""
