"""The examples of poprithms' unwinding notes as UnwindGraph builders, used by the tests, the
docs figures and demos.

Each returns the graph and a dict of its named tensors.
"""

from __future__ import annotations

from popart_unwind.unwind import UnwindGraph


def basic(value: float = 5.0):
    """A sink tied to a source, feeding a barrier: the best score is 6 * value."""
    g = UnwindGraph()
    sink = g.sink((2, 3), "sink")
    source = g.source((2, 3), "source")
    g.valued_pair(sink, source, value)
    (out,) = g.barrier([sink], [(2, 3)], "out")
    return g, {"sink": sink, "source": source, "out": out}


def dim_shuffle(value: float = 7.5):
    """A layout wanted after a transpose unwinds to the sink transposed back (30 points)."""
    g = UnwindGraph()
    sink = g.sink((2, 2), "sink")
    shuffled = g.dim_shuffle(sink, (1, 0), "shuffled")
    source = g.source((2, 2), "source")
    g.valued_pair(shuffled, source, value)
    return g, {"sink": sink, "shuffled": shuffled, "source": source}


def matmul(value: float = 1.0):
    """out = matmul(X.dimShuffle(1 0), concat(Y, Z.reverse(1))) with both operands' layouts
    prescribed by Sources; the output is a FixedPoint."""
    g = UnwindGraph()
    x = g.sink((3, 2), "X")
    y = g.sink((2, 4), "Y")
    z = g.sink((1, 4), "Z")
    lhs = g.dim_shuffle(x, (1, 0), "lhs")
    rhs = g.concat([y, g.reverse(z, (1,), "Zrev")], 0, "rhs")
    lhs_source = g.source((2, 3), "lhs_target")
    rhs_source = g.source((3, 4), "rhs_target")
    g.valued_pair(lhs, lhs_source, value)
    g.valued_pair(rhs, rhs_source, value)
    (out,) = g.fixed_point([lhs, rhs], [(2, 4)], "out")
    return g, {
        "X": x,
        "Y": y,
        "Z": z,
        "lhs": lhs,
        "rhs": rhs,
        "lhs_target": lhs_source,
        "rhs_target": rhs_source,
        "out": out,
    }


def unbroadcast_add(value: float = 1.0):
    """Out = matmul(A, B) + C with the matmul as a Barrier: all three pairs can be met."""
    g = UnwindGraph()
    a, b, c = g.sink((2, 3), "A"), g.sink((3, 4), "B"), g.sink((2, 4), "C")
    g.valued_pair(a, g.source((2, 3), "A_target"), value)
    g.valued_pair(b, g.source((3, 4), "B_target"), value)
    (product,) = g.barrier([a, b], [(2, 4)], "matmul")
    out = g.sum_like([product, c], 0, value).out
    return g, {"A": a, "B": b, "C": c, "matmul": product, "out": out}


def broadcast_add(value: float = 1.0, activation_shape=(2, 3, 2), bias_shape=(3, 1)):
    """An activation plus a numpy-broadcast bias (the notes' is (6, 1) onto (20, 20, 6, 3)):
    the bias takes the layout a SumLikeReduce of the activation makes."""
    g = UnwindGraph()
    x = g.sink(activation_shape, "x")
    g.valued_pair(x, g.source(activation_shape, "x_target"), value)
    (activation,) = g.barrier([x], [activation_shape], "activation")
    bias = g.sink(bias_shape, "bias")
    result = g.sum_like([activation, bias], 0, value)
    return g, {
        "x": x,
        "activation": activation,
        "bias": bias,
        "out": result.out,
        "reduced": result.reductions[0][1],
    }


def call_copies(v_copy: float = 1.0, v_matmul: float = 1.0, v_sum: float = 1.0):
    """Callee Call(a, b) = matmul(a.transpose(), b.reshape((2, 3))), caller
    Call(A, B) + Call(C, D): 9 ValuedPairs, and one solution meets them all."""
    g = UnwindGraph()
    a, b = g.sink((2, 2), "a"), g.sink((6,), "b")
    lhs = g.dim_shuffle(a, (1, 0), "aT")
    rhs = g.reshape(b, (2, 3), "b23")
    g.valued_pair(lhs, g.source((2, 2), "lhs_target"), v_matmul)
    g.valued_pair(rhs, g.source((2, 3), "rhs_target"), v_matmul)
    (out,) = g.fixed_point([lhs, rhs], [(2, 3)], "out")
    big_a, big_b = g.sink((2, 2), "A"), g.sink((6,), "B")
    big_c, big_d = g.sink((2, 2), "C"), g.sink((6,), "D")
    (e,) = g.call([big_a, big_b], [a, b], [out], v_copy)
    (f,) = g.call([big_c, big_d], [a, b], [out], v_copy)
    total = g.sum_like([e, f], 0, v_sum).out
    return g, {
        "a": a,
        "b": b,
        "A": big_a,
        "B": big_b,
        "C": big_c,
        "D": big_d,
        "E": e,
        "F": f,
        "out": out,
        "sum": total,
    }


def fixed_point_calls(v_target: float, v_chain: float, v_copy: float, as_barrier: bool = False):
    """out = Call(Call(Call(input))) with Call(x) = matmul(w, x).

    Shapes w (2, 2) and x (2, 3) (so out is (2, 3)) are the ones consistent with the notes'
    scores: Solution 1 (x takes its target layout) scores 10·vT + 24·vC and Solution 2 (x
    takes the matmul output's layout) scores 4·vT + 6·vM + 36·vC.
    """
    g = UnwindGraph()
    w, x = g.sink((2, 2), "w"), g.sink((2, 3), "x")
    g.valued_pair(w, g.source((2, 2), "w_target"), v_target)
    g.valued_pair(x, g.source((2, 3), "x_target"), v_target)
    make = g.barrier if as_barrier else g.fixed_point
    (out,) = make([w, x], [(2, 3)], "out")
    g.valued_pair(x, out, v_chain)
    current = g.sink((2, 3), "input")
    named = {"w": w, "x": x, "out": out, "input": current}
    for label in ("a", "b", "c"):
        (current,) = g.call([current], [x], [out], v_copy)
        named[label] = current
    return g, named
