"""The stand-in server's planted bugs (:class:`~.standin.StandIn`'s ``bug=``): what each models
and the verdict the endpoint audit must give it. Each is a one-line change in
:mod:`.standin`, marked ``# bug:`` there.

===================  ====================  ==================================================
bug                  verdict               models
===================  ====================  ==================================================
greedy_verify        lossy                 verification commits the target's argmax at T > 0
                                           (sglang PR#9127, greedy verify on some hardware)
no_speculation       no_speculation        speculation silently off: plain sampling, counters 0
off_with_logprobs    pass, flagged         speculation off only for requests that ask for
                                           probabilities (vllm#34497)
zero_logprobs        misreported           every emitted token reported with probability 1.0,
                                           logprob 0.0 (llama.cpp#27972)
first_token_only     misreported           only the first token's reported probability is the
                                           target's; later ones are the draft's (PR#27196)
ignores_seed         contract_violation    a fixed private seed whatever the request says
nan_reports          lossy                 greedy_verify, and requests asking for probabilities
                                           of several tokens refused HTTP 400 (a NaN at a
                                           drafted position, not writable as JSON): the
                                           rejection found first stays the verdict
ignores_top_k        usage error           ``top_k`` accepted but not applied, in the law and in
                                           sampling alike (the audit refuses before sampling)
flaky                pass                  every ``flaky_every``-th request fails, HTTP 503 and a
                                           dropped connection alternately (retries absorb it)
dies                 underpowered          after ``dies_after`` requests it stops answering:
                                           connections refused (``die="refuse"``) or hung
                                           until the stand-in stops (``die="hang"``)
crashes              underpowered          request ``dies_after + 1`` gets HTTP 500, then the
                                           server is gone (connections refused): the fault
                                           names the HTTP 500, not only the refusals after it
batch_rows           lossy                 with more than 2 requests in flight, verification
                                           is given another request's draft rows (those of
                                           the request served before it, 1Cat-vLLM#656);
                                           alone it is exact, so
                                           ``--load 1 --load 8`` reads "lossy only with 8 in
                                           flight"
stream_step_tail     contract violation    a streamed answer keeps only the last token of each
                                           speculative step (vllm PR#26027): streamed and
                                           non-streamed answers for one seed differ
seed_in_flight       pass; contract        the seed is ignored while another request is in
                     violation under load  flight (a random one is drawn): the law holds, one
                                           request at a time reproduces, so only the load
                                           axis's seed check sees it
stop_past_block      contract violation    a stop string completed inside a step's block is
                                           honoured at the block's end: tokens past the stop
stop_tail_only       contract violation    only each block's tail is scanned for a stop string:
                                           a stop inside a block is missed
stale_after_hit      acceptance_low        after a prefix-cache hit the drafts come after the
                                           context's first token alone, their law told: the
                                           law holds, acceptance drops after a hit only
prefix_poison        lossy                 after a prefix-cache hit (``cache_prompt`` and the
                                           prompt of the request served before), verification
                                           is given that request's draft rows; exact cold
ignores_cache        pass                  cache_prompt never honoured: every request cold
                                           (cache_n 0); the sign-off's prefix-cache item
                                           reads not tested
shared_choices       lossy                 the completions of a request for several
                                           (``n_cmpl``) share one generator: each is a sample
                                           of the law, but they are all equal (the
                                           completions axis's independence test)
fork_rows            lossy                 a completion after the first of a request is
                                           verified against the draft rows of the one before
                                           it: exact one completion a request
adapter_of_batch     pass; lossy under     with LoRA adapters (``adapters``), a request runs
                     load                  with the adapter of another request in flight (the
                                           batch's, not its own: vllm PR#21068's class); alone
                                           it is exact, so only the load axis's mixed batches
                                           (background requests with adapters) see it
verify_server_       pass; lossy with      with LoRA adapters, a request asking its own scales
scale                ``--adapter``         gets its first token at them and its drafts verified
                                           at the server's own (the request's scales dropped
                                           from the verify pass): exact for requests naming no
                                           adapter, so only ``--adapter`` sees it
prefill_window       pass; contract        the laws along a path (vLLM's ``prompt_logprobs``,
                     violation with the    one prefill forward) past the 8th token are read
                     vllm family           from the last 8 tokens alone, a window the decode
                                           path (generation, the one-token recipe) does not
                                           have: only a family that reads laws along a path
                                           sees it, and only past the first positions, where
                                           the check before sampling does not look; the
                                           check at random depths during sampling names it
                                           (``teacher_forcing_differs``) where the token test
                                           alone would call a correct generation lossy
averaged_metric      misreported           ``GET /metrics`` gives accepted drafts as the drafted
                                           total times the mean of the requests' accepted
                                           shares (a mean of ratios for a ratio of sums,
                                           THUDM/slime PR#2240): every answer right, the
                                           dashboard's acceptance wrong
===================  ====================  ==================================================

"""

from __future__ import annotations

from specproof.properties.endpoint.families.wire import token_texts
from specproof.properties.engine.contract import Sampling
from specproof.properties.verdicts import Planted, Verdict, planted

#: stop strings over the stand-in's token texts: one token's whole text, and one that spans two
STOP_SETTING = Sampling(1.0, stop=("<t2>", "3><t1"), texts=tuple(token_texts(8)))
#: the planted bugs: bug -> the verdict the endpoint audit must give and the public bug class it
#: models (``error``: refused before sampling, a usage error)
BUGS: dict[str, Planted] = planted(
    Planted(
        "greedy_verify",
        Verdict.LOSSY,
        "verification commits the target's argmax at T > 0 (sglang PR#9127: greedy verify on some "
        "hardware); the first token, sampled before any draft, stays random",
    ),
    Planted("no_speculation", Verdict.NO_SPECULATION, "speculation silently off: plain sampling, counters 0"),
    Planted(
        "off_with_logprobs",
        Verdict.PASS,
        "speculation off only for requests that ask for probabilities (vllm#34497): the law holds, "
        "speculation.off_when_probabilities_requested says so",
    ),
    Planted(
        "zero_logprobs",
        Verdict.MISREPORTED,
        "every emitted token reported with probability 1.0 / logprob 0.0 (llama.cpp#27972)",
    ),
    Planted(
        "first_token_only",
        Verdict.MISREPORTED,
        "only the first token's reported probability is the target's, later ones are the draft "
        "model's (PR#27196)",
    ),
    Planted("ignores_seed", Verdict.CONTRACT_VIOLATION, "a fixed private seed: every request decodes alike"),
    Planted(
        "ignores_top_k",
        Verdict.ERROR,
        "top_k accepted but not applied, in the law and in sampling alike (refused before sampling)",
        settings=(Sampling(1.0, top_k=3),),
    ),
    Planted(
        "flaky",
        Verdict.PASS,
        "every flaky_every-th request fails: HTTP 503 and a dropped connection alternately",
    ),
    Planted(
        "dies",
        Verdict.UNDERPOWERED,
        "stops answering after dies_after requests (connections refused, or hung past the timeout)",
    ),
    Planted(
        "crashes",
        Verdict.UNDERPOWERED,
        "request dies_after + 1 is answered HTTP 500 and the server exits: every later connection "
        "is refused (vLLM's CPU build and top_k under speculation); the audit names the HTTP 500",
    ),
    Planted(
        "batch_rows",
        Verdict.LOSSY,
        "with more than 2 requests in flight the verifier is given another request's draft rows (those "
        "of the request served before it; 1Cat-vLLM#656, vllm PR#14645): exact alone, lossy only under "
        "load",
    ),
    Planted(
        "stream_step_tail",
        Verdict.CONTRACT_VIOLATION,
        "a streamed answer keeps only the last token of each speculative step (vllm PR#26027): the "
        "stream and the non-streamed answer for one seed differ",
    ),
    Planted(
        "seed_in_flight",
        Verdict.PASS,
        "the seed is ignored while another request is in flight: the law holds and one request at a "
        "time reproduces, so only the load axis's seed check flags it (contract_violation with --load)",
    ),
    Planted(
        "stop_past_block",
        Verdict.CONTRACT_VIOLATION,
        "a stop string completed inside a speculative step's block is honoured only at the block's end: "
        "the block's tokens after it are returned (sglang#31599)",
        settings=(STOP_SETTING,),
    ),
    Planted(
        "stop_tail_only",
        Verdict.CONTRACT_VIOLATION,
        "only the tail of each block is scanned for a stop string: one completed inside a block is "
        "missed and generation goes on (PR#33758)",
        settings=(STOP_SETTING,),
    ),
    Planted(
        "prefix_poison",
        Verdict.LOSSY,
        "after a prefix-cache hit the verifier is given the draft rows of the request that filled the "
        "cache (a hit that poisons the draft's state): exact cold, so --prefix-cache reads \"lossy only "
        'after a prefix-cache hit"',
    ),
    Planted(
        "stale_after_hit",
        Verdict.ACCEPTANCE_LOW,
        "after a prefix-cache hit the draft model's cache is not refilled (drafts after the context's "
        "first token alone) and the verifier is told their law: the law holds, fewer drafts are "
        "accepted than cold (the prefix-cache axis's acceptance comparison flags it)",
    ),
    Planted(
        "ignores_cache",
        Verdict.PASS,
        "cache_prompt accepted but never honoured: every request is served cold (timings.cache_n 0), "
        "so --prefix-cache tests nothing of the cache and its sign-off item reads not tested",
    ),
    Planted(
        "shared_choices",
        Verdict.LOSSY,
        "the completions of a request for several (n_cmpl) share one generator: each is a sample of the "
        "law and one completion a request is exact, but a request's completions are all equal, so the "
        'completions axis\'s independence test reads "lossy only with 4 completions a request"',
    ),
    Planted(
        "fork_rows",
        Verdict.LOSSY,
        "each completion after the first of a request for several is verified against the draft rows of "
        "the completion before it (a forked sequence reading its parent's draft state): exact one "
        "completion a request, lossy only with several",
    ),
    Planted(
        "adapter_of_batch",
        Verdict.PASS,
        "with LoRA adapters held, a request runs with the adapter of another request in flight (the "
        "batch's, not its own; vllm PR#21068's class): one request at a time is exact, so only the load "
        "axis, whose background requests carry adapters, flags it (lossy with --load)",
    ),
    Planted(
        "verify_server_scale",
        Verdict.PASS,
        "with LoRA adapters held, a request asking its own adapter scales samples its first token at "
        "them but has its drafts verified at the server's own scales (the request's dropped from the "
        "verify pass): a request naming no adapter is exact, so only an audit whose requests ask for "
        "one (--adapter) flags it (lossy)",
    ),
    Planted(
        "prefill_window",
        Verdict.PASS,
        "the laws along a path (vLLM's prompt_logprobs) past the 8th token read from the last 8 "
        "tokens alone, the decode path exact: the llama.cpp family never reads them; with the vllm "
        "family the check at random depths gives contract_violation (teacher_forcing_differs)",
    ),
    Planted(
        "averaged_metric",
        Verdict.MISREPORTED,
        "GET /metrics reports accepted draft tokens as the drafted total times the mean of the requests' "
        "accepted shares (a mean of per-request ratios where a ratio of sums is meant; THUDM/slime "
        "PR#2240): every answer is right, the dashboard's acceptance is not",
    ),
    Planted(
        "nan_reports",
        Verdict.LOSSY,
        "greedy_verify's lossy verification, and every request asking for probabilities of more "
        "than one token refused HTTP 400 (a NaN the server cannot write as JSON, as vLLM's CPU "
        "build): the law's rejection, found first, stays the verdict",
    ),
)

#: the planted faults that live in the transport (a socket's): only a listening stand-in has them
TRANSPORT_FAULTS = ("flaky", "dies", "crashes")
#: the private seed of ``ignores_seed``
FIXED_SEED = 1234
