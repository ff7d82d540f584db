"""``attnforge bench``: attnforge's kernels beside PyTorch's (SDPA cuDNN and flash, compiled
FlexAttention), row by row, in one run, each attnforge row verified against the float64 reference.

One job per module:

- ``matrix``: the rows (shapes, dtypes, groups), the ``--quick`` subset, filters, FLOP and byte counts;
- ``providers``: what is timed (sdpa-cudnn, sdpa-flash, flex, attnforge-BACKEND), each able to say
  why it cannot run a row;
- ``timing``: CUDA-event timing in the manner of ``triton.testing.do_bench`` (warm-up, L2 flush,
  median), providers interleaved in rounds;
- ``check``: a row's outputs against the float64 reference on slices of the row;
- ``runner``: rows x providers, with progress, time limit and n/a reasons;
- ``summary``: ratios to a baseline per row, geometric means, the worst row;
- ``environment``: versions, GPU and driver, for the record;
- ``render``: JSON, Markdown and a PNG plot;
- ``command``: the CLI subcommand (``add_parser``, ``run``).

Only ``providers``, ``timing``, ``runner`` and ``check`` touch torch, and only when a run starts:
``attnforge bench --dry-run`` imports no torch at all.
"""
