"""Writes sm90_wgmma_ops.inc: the wgmma.mma_async wrappers of sm90_gemm.cuh, whose operand lists
(one "+f" register per accumulator, up to 128) are too long to write by hand.

    python3 ops/conv/gen_sm90_wgmma_ops.py > ops/conv/sm90_wgmma_ops.inc

wgmma_op<N, TRANS>::mma(d, da, db, scale_d): d[N/2] (+)= A (64 x 16) . B (16 x N), bf16 operands
from shared-memory descriptors, fp32 accumulators; TRANS 0: both K-major, 1: both MN-major
(imm-trans-a = imm-trans-b = 1); scale_d 0 overwrites d."""

HEADER = """/* sm90_wgmma_ops.inc (written by gen_sm90_wgmma_ops.py: do not edit): wgmma.mma_async
 * m64nNk16, f32 += bf16 . bf16, A and B from 128B-swizzled shared-memory descriptors, for
 * N = 64, 128, 256, both operands K-major (TRANS 0) or both MN-major (TRANS 1). Included by
 * sm90_gemm.cuh inside namespace dt_sm90. */"""


def op(n, trans):
    regs = n // 2
    lines = []
    lines.append(f"template <> struct wgmma_op<{n}, {trans}> {{")
    lines.append(f"    static __device__ __forceinline__ void mma(float (&d)[{regs}], uint64_t da, uint64_t db, int scale_d) {{")
    lines.append("        asm volatile(\"{\\n.reg .pred p;\\nsetp.ne.b32 p, %" + str(regs + 2) + ", 0;\\n\"")
    lines.append(f"                     \"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 {{\"")
    groups = [", ".join(f"%{i}" for i in range(s, min(regs, s + 16))) for s in range(0, regs, 16)]
    for i, g in enumerate(groups):
        lines.append(f"                     \"{g}{',' if i < len(groups) - 1 else ''}\"")
    lines.append(f"                     \"}}, %{regs}, %{regs + 1}, p, 1, 1, {trans}, {trans};\\n}}\\n\"")
    outs = [", ".join(f"\"+f\"(d[{i}])" for i in range(s, min(regs, s + 8))) for s in range(0, regs, 8)]
    lines.append("                     : " + ",\n                       ".join(outs))
    lines.append("                     : \"l\"(da), \"l\"(db), \"r\"(scale_d));")
    lines.append("    }")
    lines.append("};")
    return "\n".join(lines)


if __name__ == "__main__":
    print(HEADER)
    for trans in (0, 1):
        for n in (64, 128, 256):
            print(op(n, trans))
