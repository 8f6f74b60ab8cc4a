"""The calibration set (bench/sweeps/calibration_bench.py, issue 39): published training and inference
jobs rebuilt as programs and run in timing-only execution. Two rows run at their published size and must
stay in their band (throughput within 10% of the published figure, peak memory within 5% where the
source gives it): a change to the timing model or a profile that moves them out fails here. The others
take minutes (make bench runs them); the rows outside their band today (torchtitan's 8B, gpt-fast's
Llama-3-8B, MosaicML's MPT rows but the 13B one; docs/timing.md says why) are not asserted. Every program
builds the published model (its parameter count is the source's), and the Llama and MPT programs run
scaled down and check that their figures agree with each other."""

from dataclasses import replace

import pytest
from support import calibration as cb  # tests/support (pytest's pythonpath)

GIB = 1 << 30


def _row(name, **config):
    row = next(r for r in cb.ROWS if r.name == name)
    return replace(row, config=replace(row.config, **config), gpus=config.get("ranks", row.gpus))


def _check(r, tokens_per_gpu_step):
    r0 = r["rank0"]
    assert r["ranks_agree"]  # every rank's step ends at the same virtual time
    assert r["tok_s_gpu"] * r["step_s"] == pytest.approx(tokens_per_gpu_step, rel=1e-9)
    assert 0 < r["mfu"] < 1 and 0 < r0["hw_mfu"] < 1
    assert 0 < r0["compute_s"] <= r["step_s"]
    assert 0 <= r0["exposed_comm_s"] <= r0["comm_s"] <= r["step_s"]
    assert 0 < r0["peak_allocated"] <= r0["peak_reserved"] <= r0["capacity"]
    assert r["ratio"] == pytest.approx(r["tok_s_gpu"] / r["published"]["tok_s_gpu"])


# The band of a published row (issue 39): throughput within 10%, peak memory within 5%.
THROUGHPUT_BAND = 0.10
MEMORY_BAND = 0.05


def _in_band(r):
    assert abs(r["ratio"] - 1) <= THROUGHPUT_BAND, (r["row"], r["ratio"])
    if "mem_gib" in r["published"]:
        assert abs(r["mem_ratio"] - 1) <= MEMORY_BAND, (r["row"], r["mem_ratio"])


def test_megatron_22b_with_sequence_parallelism_on_8_a100s_is_within_its_band():
    # Full size: 8 ranks of Megatron's GPT 22B, TP8 with sequence parallelism and selective recompute
    row = next(r for r in cb.ROWS if r.name == "megatron-22b-tp8-sp-sel-a100")
    r = cb.run_row(row, steps=1)
    _check(r, row.config.batch * row.config.seq / row.config.ranks)
    assert r["rank0"]["exposed_comm_s"] > 0  # tensor parallelism's collectives are on the critical path
    _in_band(r)


def test_gpt_fast_llama2_7b_decode_on_an_a100_is_within_its_band():
    row = next(r for r in cb.ROWS if r.name == "gpt-fast-llama2-7b-decode-a100")
    r = cb.run_row(row, steps=1)
    _check(r, row.config.new_tokens)
    # Batch-1 decode reads every weight per token, so its effective rate is at most the memory's peak
    assert 0 < r["bw_gbs"] * 1e9 <= r["rank0"]["memory_bandwidth"]
    _in_band(r)


def test_llama_fsdp2_with_selective_activation_checkpointing():
    row = _row("titan-llama3.1-8b-fsdp8-h100", dim=256, layers=2, heads=4, kv_heads=2, ffn_hidden=512,
               vocab=1024, seq=512, batch=2, ranks=2, ac="op")
    r = cb.run_row(row, steps=1)
    _check(r, 2 * 512)
    assert r["rank0"]["comm_s"] > 0  # FSDP2's all-gathers and reduce-scatters
    assert r["rank0"]["breakdown_s"]["attention"] > 0


def test_gpt_fast_llama3_8b_decode_reads_its_grouped_query_cache_on_an_a100():
    # Full size, batch-1 decode of Llama-3-8B (8 kv heads for 32 query heads). Its ratio to the published
    # 94.25 tokens/s is 0.89 today, outside the band, so only its consistency is asserted here.
    row = next(r for r in cb.ROWS if r.name == "gpt-fast-llama3-8b-decode-a100")
    r = cb.run_row(row, steps=1)
    _check(r, row.config.new_tokens)
    assert r["rank0"]["params"] == 8_030_261_248  # Llama 3 8B
    assert 0 < r["bw_gbs"] * 1e9 <= r["rank0"]["memory_bandwidth"]
    llama2 = next(x for x in cb.ROWS if x.name == "gpt-fast-llama2-7b-decode-a100")
    assert row.config.kv_heads * 4 == row.config.heads and llama2.config.kv_heads == llama2.config.heads


def _params(config):
    import torch

    build = {cb.MptTrain: cb._mpt, cb.GptFastDecode: cb._gpt_fast, cb.LlamaTrain: cb._llama}[type(config)]
    with torch.device("meta"):
        return sum(p.numel() for p in build(config)().parameters())


def test_every_program_builds_the_published_model():
    # The sources' own parameter counts: MosaicML's NumParams column (learned positions up to the row's
    # sequence length, biases), Llama 3 8B and Llama 2 7B as their model cards give them.
    published = {"titan-llama3.1-8b-fsdp8-h100": 8_030_261_248, "gpt-fast-llama2-7b-decode-a100": 6_738_415_616,
                 "gpt-fast-llama3-8b-decode-a100": 8_030_261_248, "mpt-7b-fsdp8-a100": 6_658_859_008,
                 "mpt-7b-seq32k-fsdp8-a100": 6_784_688_128, "mpt-13b-fsdp8-a100": 12_853_954_560,
                 "mpt-7b-fsdp8-h100": 6_658_859_008}
    rows = {r.name: r for r in cb.ROWS}
    for name, count in published.items():
        assert _params(rows[name].config) == count, name


def test_mpt_fsdp_with_gradient_accumulation_and_activation_checkpointing():
    small = dict(d_model=256, layers=2, heads=4, vocab=1024, seq=512, micro_batch=2, grad_accum=2, ranks=2)
    plain = cb.run_row(_row("mpt-7b-fsdp8-a100", **small), steps=1)
    _check(plain, 2 * 2 * 512)  # micro batches x accumulation x sequence per GPU and step
    assert plain["rank0"]["comm_s"] > 0
    assert plain["rank0"]["breakdown_s"]["attention"] > 0
    ckpt = cb.run_row(_row("mpt-7b-seq32k-fsdp8-a100", **small), steps=1)
    _check(ckpt, 2 * 2 * 512)
    # checkpointing every block recomputes its forward in the backward: more matmul time, same step work
    assert ckpt["rank0"]["breakdown_s"]["matmul"] > plain["rank0"]["breakdown_s"]["matmul"]
    assert ckpt["rank0"]["kernels"] > plain["rank0"]["kernels"]


def test_torchtitans_published_out_of_memory_configuration_runs_out_of_memory_and_the_nearest_that_fits_does_not():
    # Issue 39's edge: torchtitan reports Llama 2 70B on 64 A100s of 80 GB out of memory at local batch 2
    # with selective op AC, and publishes batch 1 (355 tokens/s/GPU). 64 ranks: symmetric-rank mode.
    oom = next(r for r in cb.ROWS if r.name == "titan-llama2-70b-fsdp64-a100-sel-op-b2")
    r = cb.run_row(oom, steps=1)
    assert r["oom"] is True and "torch.OutOfMemoryError" in r["error"]
    fits = next(r for r in cb.ROWS if r.name == "titan-llama2-70b-fsdp64-a100-sel-op")
    r = cb.run_row(fits, steps=1)
    _check(r, fits.config.batch * fits.config.seq)
    assert r["rank0"]["peak_reserved"] <= r["rank0"]["capacity"]
    assert r["rank0"]["params"] == 68_976_648_192  # Llama 2 70B


@pytest.mark.parametrize("parallel", [{"tp": 4}, {"hsdp_shard": 4}])
def test_llama_with_tensor_parallelism_or_hsdp_at_16_ranks_in_symmetric_rank_mode(parallel):
    # Rows of more than 8 ranks run as one stand-in process (python -m torch_openreg.symmetric)
    row = _row("titan-llama3.1-8b-fsdp8-h100", dim=256, layers=2, heads=8, kv_heads=4, ffn_hidden=512,
               vocab=1024, seq=512, batch=2, ranks=16, ac="full", **parallel)
    r = cb.run_row(row, steps=1)
    _check(r, 2 * 512 // parallel.get("tp", 1))  # a tensor-parallel group shares its batch
    assert r["rank0"]["comm_s"] > 0 and r["max_rank_rss_gib"] < 1


def test_llama_as_a_pipeline_of_tensor_parallel_fsdp_stages_at_16_ranks_in_symmetric_rank_mode():
    # PP 2 x FSDP 4 x TP 2: two stand-in processes, one per stage; the step ends with the later stage's
    row = _row("titan-llama3.1-8b-fsdp8-h100", dim=256, layers=4, heads=8, kv_heads=4, ffn_hidden=512,
               vocab=1024, seq=512, batch=4, ranks=16, ac="full", tp=2, pp=2)
    r = cb.run_row(row, steps=1)
    stages = [r["rank0"]]  # rank 0 stands in for the first stage
    assert r["step_s"] >= stages[0]["step_s"] > 0
    assert r["tok_s_gpu"] * r["step_s"] == pytest.approx(4 * 512 / (2 * 2), rel=1e-9)  # batch x seq / (TP x PP)
    assert r["rank0"]["params"] == _params(row.config)  # the whole model's, not the stage's
    assert r["rank0"]["comm_s"] > 0 and r["max_rank_rss_gib"] < 1
