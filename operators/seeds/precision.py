"""A GEMM seed's fp32 dots on the tensor cores: the same program at another ``input_precision``.

Inductor's matmul template multiplies fp32 operands at full precision on the
FMA units (``allow_tf32=ALLOW_TF32`` with ``ALLOW_TF32 = False``): on an H200,
2_ShallowWideMLP's GEMM region ran 6.2 ms that way and 0.85 ms once the search
had moved its dot to ``tf32``, within the region's cutoff; with 8 evaluations
a region, two other regions never got there. The twins start there:

- ``tf32``: one tensor-core pass on operands rounded to 10 mantissa bits, the
  fastest;
- ``tf32x3``: three passes that recover near-fp32 products, for the problems
  whose cutoff tf32 does not meet.

Each is a seed like any other: the judge checks it under the problem's cutoff,
and a precision that does not hold is simply ``wrong``. Only dots whose
precision the seed fixes are changed (``operators.structural``: ``allow_tf32``
with a value the kernel fixes, or an ``input_precision`` string), and only a
seed whose template reads fp32 operands gets twins (half-precision operands
take the tensor cores already; the precision changes nothing there).
"""

from __future__ import annotations

import re

from operators.seeds.variants import with_variant_line
from operators.space import Kind
from operators.tunables import apply_params, find_tunables

#: The precisions a twin is made at, in the order they are started (fastest first).
PRECISIONS = ("tf32", "tf32x3")

_WHAT = {"tf32": "every fp32 tl.dot on the tensor cores at tf32: one pass on operands rounded to 10 mantissa "
                 "bits; the cutoff judges whether that holds",
         "tf32x3": "every fp32 tl.dot on the tensor cores at tf32x3: three passes that recover near-fp32 "
                   "products; the cutoff judges whether that holds"}

# a Triton signature's fp32 pointer, as Inductor writes it in a kernel's triton_meta
_FP32_POINTER = re.compile(r"'\*fp32'")


def reads_fp32(codes: list[str], kernels: list[str]) -> bool:
    """Whether one of ``kernels`` (a seed's GEMM templates) is declared, in Inductor's ``codes``, with
    an fp32 pointer among its arguments.

    >>> reads_fp32(["triton_meta={'signature': {'arg_A': '*fp32'}},\\n"
    ...             "inductor_meta={'kernel_name': 'triton_tem_fused_mm_0'}"], ["triton_tem_fused_mm_0"])
    True
    """
    for code in codes:
        for block in code.split("@triton.jit"):
            if any(f"'kernel_name': '{k}'" in block for k in kernels) and _FP32_POINTER.search(block):
                return True
    return False


def dot_precisions(source: str) -> dict[str, str]:
    """The precision of each dot whose precision ``source`` fixes, by its tunable's name (``ieee``,
    ``tf32``, ``tf32x3``; ``allow_tf32=False`` reads ``ieee``)."""
    return {t.name: t.value for t in find_tunables(source) if t.kind is Kind.INPUT_PRECISION}


def precision_seed(source: str, precision: str) -> str | None:
    """``source`` with every dot whose precision it fixes at ``precision``, named as kevo's variant in
    its header; None when it fixes none, or all of them are at ``precision`` already."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r} is not among {PRECISIONS}")
    dots = dot_precisions(source)
    if not dots or all(value == precision for value in dots.values()):
        return None
    made = apply_params(source, {name: precision for name in dots})
    try:
        return with_variant_line(made, precision, _WHAT[precision])
    except ValueError:  # a seed without the conversion's header: the program alone
        return made


# a dot written with no precision at all: Triton multiplies fp32 operands in TF32 then
_DOT_CALL = re.compile(r"\btl\.dot\s*\(")


def lower_precision_dots(source: str) -> list[str]:
    """The dots of ``source`` that may multiply fp32 operands below fp32: those fixed at ``tf32`` or
    ``tf32x3`` (by their tunable's name) and, as ``tl.dot``, each written with no precision (Triton's
    default for fp32 operands is TF32).

    >>> kernel = "@triton.jit\\ndef k(a, b):\\n    c = tl.dot(a, b, input_precision='{}')\\n    d = tl.dot(a, b)\\n"
    >>> lower_precision_dots(kernel.format("ieee")), lower_precision_dots(kernel.format("tf32x3"))
    (['tl.dot'], ['k.dot[0].input_precision', 'tl.dot'])
    """
    fixed = [name for name, value in dot_precisions(source).items() if value in PRECISIONS]
    unset = sum(1 for _ in _DOT_CALL.finditer(source)) - len(dot_precisions(source))
    return fixed + ["tl.dot"] * max(0, unset)
