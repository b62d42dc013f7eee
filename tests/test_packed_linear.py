"""grpo_lib.packed_linear: the update's products through oneDNN's packed weights."""
import pytest
import torch
import torch.nn.functional as F

from grpo_lib.fast_decode import pack_for_rows
from grpo_lib.models import build_tokenizer, random_model
from grpo_lib.packed_linear import PACKS, PackCache, linear
from grpo_lib.packing import packing
from grpo_lib.shared_prompt import group_logprobs

PACKING = pack_for_rows(torch.randn(4, 4), 4) is not None
needs_packing = pytest.mark.skipif(not PACKING, reason="this torch has no oneDNN")


@pytest.fixture(autouse=True)
def always_pack():
    """These tests check the packed path itself, so it is taken on every machine,
    not only where packing_pays measures it faster."""
    with packing("always"):
        yield


def value_and_grads(fn, x, weight, bias):
    """fn(x, weight, bias), and the gradients of a fixed weighted sum of it."""
    leaves = [t.detach().clone().requires_grad_() for t in (x, weight)]
    b = None if bias is None else bias.detach().clone().requires_grad_()
    y = fn(leaves[0], leaves[1], b)
    probe = torch.linspace(-1, 1, y.numel()).view(y.shape)
    (y * probe).sum().backward()
    grads = [leaves[0].grad, leaves[1].grad] + ([] if b is None else [b.grad])
    return y.detach(), grads


@needs_packing
@pytest.mark.parametrize("shape", [(37, 24), (3, 11, 24)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_linear_matches_f_linear_and_its_gradients(shape, with_bias):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=g)
    weight = torch.randn(40, 24, generator=g)
    bias = torch.randn(40, generator=g) if with_bias else None
    before = PACKS.packed_count
    y, grads = value_and_grads(linear, x, weight, bias)
    y_ref, grads_ref = value_and_grads(F.linear, x, weight, bias)
    assert PACKS.packed_count > before  # the packed path ran
    torch.testing.assert_close(y, y_ref, rtol=1e-5, atol=1e-5)
    for got, want in zip(grads, grads_ref):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@needs_packing
def test_a_weight_changed_behind_autograds_back_is_packed_again():
    """``p.data.mul_`` bumps no version counter; the cache still sees the change."""
    g = torch.Generator().manual_seed(1)
    weight = torch.nn.Parameter(torch.randn(16, 8, generator=g))
    x = torch.randn(5, 8, generator=g)
    first = linear(x, weight)
    again = PACKS.packed_count
    torch.testing.assert_close(linear(x, weight), first)
    assert PACKS.packed_count == again  # unchanged weight: reused
    version = weight._version
    weight.data.mul_(-2.0)
    assert weight._version == version
    torch.testing.assert_close(linear(x, weight), F.linear(x, weight.detach()),
                               rtol=1e-5, atol=1e-5)
    assert PACKS.packed_count == again + 1


@needs_packing
def test_training_steps_see_every_update():
    """Three SGD steps through linear() follow three steps through F.linear."""
    g = torch.Generator().manual_seed(2)
    x, target = torch.randn(32, 8, generator=g), torch.randn(32, 4, generator=g)
    layers = [torch.nn.Linear(8, 4) for _ in range(2)]
    layers[1].load_state_dict(layers[0].state_dict())
    opts = [torch.optim.SGD(layer.parameters(), lr=0.5) for layer in layers]
    for _ in range(3):
        for layer, opt, fn in zip(layers, opts, (linear, F.linear)):
            opt.zero_grad()
            ((fn(x, layer.weight, layer.bias) - target) ** 2).mean().backward()
            opt.step()
    torch.testing.assert_close(layers[0].weight, layers[1].weight, rtol=1e-5,
                               atol=1e-6)
    assert not torch.equal(layers[0].weight, torch.nn.Linear(8, 4).weight)


def test_where_packing_does_not_apply_it_is_the_plain_product():
    g = torch.Generator().manual_seed(3)
    x, weight = torch.randn(6, 8, generator=g), torch.randn(4, 8, generator=g)
    assert torch.equal(linear(x.bfloat16(), weight.bfloat16()),
                       F.linear(x.bfloat16(), weight.bfloat16()))
    assert PackCache(max_bytes=0).get(weight, rows=6) is None  # over the cap
    empty = torch.zeros(0, 8, requires_grad=True)  # no rows: the plain product
    linear(empty, weight).sum().backward()
    assert linear(empty, weight).shape == (0, 4) and empty.grad.shape == (0, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # autocast's dtype, not ours
        got, want = linear(x, weight), F.linear(x, weight)
    assert got.dtype == want.dtype == torch.bfloat16 and torch.equal(got, want)


@needs_packing
def test_the_cache_holds_no_more_than_its_cap():
    cache = PackCache(max_bytes=3 * 4 * 64 + 1)  # room for one 8 x 8 float32 weight
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    assert cache.get(a, rows=4) is not None
    assert cache.get(b, rows=4) is None
    assert cache.bytes_held() == 3 * 4 * 64


@needs_packing
def test_group_logprobs_packed_or_not():
    tok = build_tokenizer()
    model = random_model(tok, "tiny").train()
    g = torch.Generator().manual_seed(4)
    N, G, P, C = 2, 3, 5, 7
    p_ids = torch.randint(3, 500, (N, P), generator=g)
    p_mask = torch.ones(N, P, dtype=torch.long)
    p_mask[0, :2] = 0  # left padding
    c_ids = torch.randint(3, 500, (N * G, C), generator=g)
    c_mask = torch.ones(N * G, C, dtype=torch.long)
    c_mask[1, 4:] = 0

    def run(packed):
        model.zero_grad()
        logp = group_logprobs(model, p_ids, p_mask, c_ids, c_mask, packed=packed)
        (logp * torch.linspace(0.5, 1.5, logp.numel()).view(logp.shape)).sum().backward()
        return logp.detach(), [p.grad.clone() for p in model.parameters()]

    (lp, grads), (lp_ref, grads_ref) = run(True), run(False)
    torch.testing.assert_close(lp, lp_ref, rtol=1e-5, atol=1e-5)
    for got, want in zip(grads, grads_ref):  # round-off, relative to each gradient
        assert (got - want).abs().max() <= 1e-4 * want.abs().max()


@needs_packing
def test_group_logprobs_calls_a_layer_that_is_not_a_plain_linear():
    """A subclass (an adapter, a quantised layer) keeps its own forward when packed."""

    class Doubled(torch.nn.Linear):
        def forward(self, x):
            return 2 * super().forward(x)

    tok = build_tokenizer()
    model = random_model(tok, "tiny").eval()
    attn = model.model.layers[0].self_attn
    doubled = Doubled(attn.q_proj.in_features, attn.q_proj.out_features)
    doubled.load_state_dict(attn.q_proj.state_dict())
    attn.q_proj = doubled
    g = torch.Generator().manual_seed(5)
    p_ids, c_ids = (torch.randint(3, 500, shape, generator=g) for shape in ((1, 4), (2, 5)))
    masks = torch.ones(1, 4, dtype=torch.long), torch.ones(2, 5, dtype=torch.long)
    with torch.no_grad():
        packed, plain = (group_logprobs(model, p_ids, masks[0], c_ids, masks[1],
                                        packed=flag) for flag in (True, False))
    torch.testing.assert_close(packed, plain, rtol=1e-5, atol=1e-5)


def test_where_packing_does_not_pay_the_cache_packs_nothing():
    """With packing off (as packing_pays decides where it measures no gain), linear
    is the plain product and nothing is packed."""
    g = torch.Generator().manual_seed(6)
    x, weight = torch.randn(5, 8, generator=g), torch.randn(4, 8, generator=g)
    before = PACKS.packed_count
    with packing("never"):
        got = linear(x, weight)
        assert PACKS.get(weight, rows=5) is None
    assert PACKS.packed_count == before
    assert torch.equal(got, F.linear(x, weight))
