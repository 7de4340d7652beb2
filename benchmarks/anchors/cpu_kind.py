"""The machine kind a benchmark's figures belong to, from /proc/cpuinfo.

"model name" on these VMs reads only "AMD EPYC", so the kind comes from the CPU family
(AMD's 0x19 is Zen 3 and Zen 4, told apart by AVX-512; 0x1A is Zen 5, whose full-width
AVX-512 units double Zen 4's float rate) and from the flags the products depend on.
"""


def cpu_kind():
    text = open("/proc/cpuinfo").read()
    first_cpu = (line.split(":", 1) for line in text.split("\n\n")[0].splitlines() if ":" in line)
    fields = {key.strip(): value.strip() for key, value in first_cpu}
    flags = set(fields.get("flags", "").split())
    family = int(fields.get("cpu family", "0"))
    vendor = fields.get("vendor_id", "")
    bf16 = "AVX512_BF16" if "avx512_bf16" in flags else "no AVX512_BF16"
    if vendor == "AuthenticAMD" and family == 0x1A:
        return f"Zen 5 (AVX-512 at full width, {bf16})"
    if vendor == "AuthenticAMD" and family == 0x19:
        return f"Zen 4 (AVX-512, {bf16})" if "avx512f" in flags else "Zen 3 (AVX2)"
    isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    return f"{vendor or 'unknown vendor'} family {family:#x} ({isa}, {bf16})"


if __name__ == "__main__":
    print(cpu_kind())
