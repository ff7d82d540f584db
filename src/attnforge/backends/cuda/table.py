"""The CUDA backend's translation table: TL statement (its node class, the form it takes) -> what
the emitter writes for it. The one home of the table: the CUDA translation manual a model reads
(``manual.translation_manual``) is made from it, and a test keeps one row per TL statement kind
(``tl.nodes.Stmt``). Each row describes the code of ``compute``/``memory`` (the statements' emitters)."""

from __future__ import annotations

TRANSLATION_TABLE: tuple[tuple[str, str, str], ...] = (
    ("Allocate", "Allocate X in global ... at t[..]", "a base pointer (int64 offsets from the tensor's strides); scratch tensors are "
                                                  "kernel arguments like the others (the loader allocates them per call)"),
    ("Allocate", "Allocate X in global ... pack G", "a base pointer at the group's first head; each Copy gives view row r its own "
                                                    "pointer: head + r % G, position r // G, masked by the view's G * Sq rows"),
    ("Allocate", "Allocate X in shared (R, D)", "a region of dynamic shared memory, rows padded by 16 bytes (ldmatrix reads 8 rows "
                                                "without bank conflicts); one slot per pipeline stage when a pipelined loop fills it"),
    ("Allocate", "Allocate X in register (BM[, N])", "fp32 fragments in the mma.sync C layout: each warp owns 16*MT rows, each "
                                                     "thread rows g and g+8 of every m16 tile"),
    ("Copy", "Copy global -> shared", "16-byte cp.async (sm_80+) with zero fill past the tensor's end, or 16-byte vector loads "
                                      "(sm_75); in a pipelined loop issued stages-1 tiles ahead, one commit group per Copy"),
    ("Copy", "Copy shared -> register", "ldmatrix: A operands (the query tile) into registers once (or per k slice inside the GEMM "
                                        "when they would not fit), B operands per 16-wide k slice inside the GEMM"),
    ("Copy", "Copy global -> register", "a (BM) or (BM, N) tile read straight into the fragment layout (rows g, g+8; columns "
                                        "2t, 2t+1 as 2-element loads), zero past the view's rows: a split-KV combine's partial results"),
    ("Copy", "Copy register -> global", "predicated 2-element stores of each thread's pairs"),
    ("Gemm", "Compute GEMM A, B[^T]", "mma.sync m16n8k16 (sm_80+) / 2x m16n8k8 (sm_75), ldmatrix (.trans for a B stored k-major) "
                                      "for B fragments"),
    ("Cast", "Compute Cast P to qkv", "in place on a fragment tile: the values are rounded where they are packed into MMA operand "
                                      "registers, at the Reshape"),
    ("Reshape", "Reshape P from mma_c to mma_a", "accumulator pairs packed into A-operand registers (af_pack)"),
    ("OnlineSoftmax", "Compute OnlineSoftmax", "row max / sum on the fragments, quad shuffles (xor 1, 2), weights exp2 of one FFMA a "
                                               "score; in base 2 with the scale folded in when the scores come straight from their "
                                               "scale (analysis/softmax); the max moves, and O and l are rescaled, only when a row of "
                                               "the warp grew past 2^8 (one __any_sync vote; the weights then stay below 2^8); a row "
                                               "that has seen nothing keeps weight 0; the row sum stays per thread until it is read"),
    ("OnlineSoftmax", "Compute OnlineSoftmax x state m, l (x 1-d)", "per row, no shuffles (every lane of a quad holds the row's "
                                                                   "value): a split-KV combine's merge of log-sum-exps; -inf weighs 0"),
    ("Normalize", "Compute Normalize", "the quad's partial row sums added up, then O / l (0 for a row that saw no key)"),
    ("LogSumExp", "Compute LogSumExp", "m + log(l) (m * ln 2 from a base-2 max), -inf for a row that saw no key"),
    ("ScoreMod", "Compute ScoreMod", "per fragment element, q_idx/kv_idx from the fragment map"),
    ("Mask", "Compute Mask S keep EXPR", "per fragment element: -inf where EXPR is false, q_idx/kv_idx from the fragment map"),
    ("Elementwise", "Compute Multiply/Add/Exp/... (elementwise)", "per fragment element; `Multiply S, scale` before a base-2 "
                                                                  "softmax becomes c = scale * log2(e), applied in the softmax's "
                                                                  "FFMA when c > 0 (here only otherwise)"),
    ("Softmax", "Compute Softmax (one pass)", "refused (TranslateError): the planner's OnlineSoftmax form is translated"),
    ("Loop", "for j = a : b pipeline stages", "a loop whose global->shared Copies are issued stages-1 iterations ahead, each waited "
                                              "for (af_cp_wait) at the depth the pipeline needs; nested pipelined loops are refused"),
    ("Loop", "for s = 0 : NSPLIT", "a plain loop (a split-KV combine's loop over the splits); `launch NSPLIT = splits(..)` is an int "
                                   "kernel argument the loader computes per call (attnforge.splits), grids may use it"),
)
