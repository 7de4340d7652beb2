"""The machine kind a benchmark's figures belong to, from /proc/cpuinfo.

"model name" on these VMs reads only "AMD EPYC" or "Intel(R) Xeon(R) Processor", so the
kind comes from the CPU family and model (AMD's 0x19 is Zen 3 and Zen 4, told apart by
AVX-512; 0x1A is Zen 5, whose full-width AVX-512 units double Zen 4's float rate; Intel's
family 6 models 0x8F and 0xCF are Sapphire and Emerald Rapids, whose AMX tile units
multiply bf16 several times faster than AVX512_BF16) and from the flags the products
depend on.
"""

INTEL_XEON = {0x8F: "Sapphire Rapids", 0xCF: "Emerald Rapids", 0xAD: "Granite Rapids"}


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
    if vendor == "GenuineIntel" and family == 6 and int(fields.get("model", "0")) in INTEL_XEON:
        amx = ", AMX" if "amx_bf16" in flags else ""
        return f"Intel {INTEL_XEON[int(fields['model'])]} (AVX-512, {bf16}{amx})"
    isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    return f"{vendor or 'unknown vendor'} family {family:#x} ({isa}, {bf16})"


if __name__ == "__main__":
    print(cpu_kind())
