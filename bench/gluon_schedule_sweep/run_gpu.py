import sys, os, math, torch, triton, time
sys.path.insert(0, os.path.dirname(__file__))
import gfa
from torch.nn.attention import sdpa_kernel, SDPBackend
import torch.nn.functional as F
torch.manual_seed(0)
dev = "cuda"

def ref(q, k, v, causal, scale):
    G = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(G, 1).double(); v = v.repeat_interleave(G, 1).double(); q = q.double()
    s = (q @ k.transpose(-1, -2)) * scale
    Sq, Sk = q.shape[2], k.shape[2]
    if causal:
        i = torch.arange(Sq, device=dev)[:, None]; j = torch.arange(Sk, device=dev)[None]
        s = s.masked_fill(j > i + Sk - Sq, float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.softmax(s, -1).nan_to_num(0.0)
    return p @ v, lse

def check(B, Hq, Hkv, Sq, Sk, D, causal, dtype, bshd=False, **kw):
    if bshd:
        q = torch.randn(B, Sq, Hq, D, device=dev, dtype=dtype).transpose(1, 2)
        k = torch.randn(B, Sk, Hkv, D, device=dev, dtype=dtype).transpose(1, 2)
        v = torch.randn(B, Sk, Hkv, D, device=dev, dtype=dtype).transpose(1, 2)
    else:
        q, k, v = (torch.randn(B, H, S, D, device=dev, dtype=dtype) for H, S in ((Hq, Sq), (Hkv, Sk), (Hkv, Sk)))
    scale = D ** -0.5
    fn = kw.pop("fn", gfa.attention)
    o, lse = fn(q, k, v, causal, scale, **kw)
    torch.cuda.synchronize()
    ro, rl = ref(q, k, v, causal, scale)
    err = (o.double() - ro).abs().max().item()
    fin = torch.isfinite(rl)
    lerr = (lse.double()[fin] - rl[fin]).abs().max().item() if fin.any() else 0.0
    lse_inf_ok = bool((lse[~fin] == float("-inf")).all())
    ok = err < (2e-2 if dtype == torch.bfloat16 else 4e-3) and lerr < 1e-3 and lse_inf_ok
    return ok, err, lerr

def flops(B, Hq, Sq, Sk, D, causal):
    f = 4 * B * Hq * Sq * Sk * D
    return f / 2 if causal else f

def bench(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=100)

MODE = sys.argv[1] if len(sys.argv) > 1 else "all"
print("== correctness")
bad = 0
cases = [(1, 2, 1, 200, 200, 64, False), (1, 2, 1, 200, 200, 64, True), (2, 4, 2, 1000, 1000, 128, True),
         (2, 4, 2, 1000, 1000, 128, False), (1, 4, 1, 300, 777, 128, True), (1, 4, 4, 777, 300, 128, True),
         (1, 2, 2, 513, 1031, 256, True), (1, 2, 2, 513, 1031, 256, False), (2, 8, 2, 128, 4096, 64, True)]
for cfgname, kw in [("pp-ov", dict(overlap=True, fn=gfa.attention_pp)), ("pp-plain", dict(overlap=False, fn=gfa.attention_pp))]:
    for (B, Hq, Hkv, Sq, Sk, D, c) in cases:
        for dt in (torch.float16, torch.bfloat16):
            BN = 64 if D == 256 else 128
            ok, e, le = check(B, Hq, Hkv, Sq, Sk, D, c, dt, bshd=(Sq == 1000), BN=BN, **dict(kw))
            print(".", end="", flush=True)
            if not ok:
                bad += 1
                print("FAIL", cfgname, B, Hq, Hkv, Sq, Sk, D, c, dt, e, le)
print("failures:", bad)
if MODE == "correct": sys.exit(0)

print("== sweep")
def sweep(B, H, S, D, dt, causal, configs):
    q, k, v = (torch.randn(B, H, S, D, device=dev, dtype=dt) for _ in range(3))
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        t_cudnn = bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
    out = []
    for name, fn, kw in configs:
        try:
            t = bench(lambda: fn(q, k, v, causal, **kw))
            out.append(f"{t_cudnn/t:.3f}")
        except Exception as e:
            out.append("ERR:" + str(e).splitlines()[0][:60])
    print(f"D={D} S={S} {str(dt)[6:]} causal={causal} cuDNN {flops(B,H,S,S,D,causal)/t_cudnn*1e-9:.0f} TF/s | " + " ".join(f"{c[0]}={o}" for c, o in zip(configs, out)), flush=True)

for D, BNs, STs in [(128, (128, 64), (2, 3)), (64, (128,), (2, 3, 4)), (256, (64,), (2,))]:
    H = 2048 // D
    configs = [("ws8", gfa.attention, dict(BN=BNs[0], STAGES=STs[0], overlap=False))]
    for BN in BNs:
        for ST in STs:
            for ov in (False, True):
                configs.append((f"pp{'O' if ov else 'P'}-{BN}-{ST}", gfa.attention_pp, dict(BN=BN, STAGES=ST, overlap=ov)))
    for causal in (False, True):
        sweep(4, H, 4096, D, torch.bfloat16, causal, configs)
for D in (64, 128, 256):
    for causal in (False, True):
        BN = 64 if D == 256 else 128
        sweep(16, 2048 // D, 1024, D, torch.float16, causal, [("ws8", gfa.attention, dict(BN=BN, overlap=False)), ("ppO", gfa.attention_pp, dict(BN=BN, overlap=True)), ("ppP", gfa.attention_pp, dict(BN=BN, overlap=False))])
sweep(1, 16, 16384, 128, torch.bfloat16, False, [("ppO", gfa.attention_pp, dict(BN=128, overlap=True)), ("ppP", gfa.attention_pp, dict(BN=128, overlap=False))])
