"""LazyAdam: Adam on the rows a sparse gradient holds, fused Adam for the rest."""

import io

import torch
import torch.nn.functional as F

from reward_models.training.lazy_adam import LazyAdam, row_groups


def _tables(seed: int = 0) -> tuple[torch.nn.Parameter, torch.nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    rows = torch.nn.Parameter(torch.randn(6, 4, generator=g))
    dense = torch.nn.Parameter(torch.randn(3, 4, generator=g))
    return rows, dense


def _groups(rows: torch.Tensor, dense: torch.Tensor) -> list[dict]:
    return row_groups([rows, dense], [rows])


def _loss(rows: torch.Tensor, dense: torch.Tensor, index: torch.Tensor, sparse: bool) -> torch.Tensor:
    e = F.embedding(index, rows, sparse=sparse)
    return ((e @ dense.T) ** 2).sum() + e.sum()


def test_every_row_every_step_is_adam() -> None:
    """When each step reads every row (some twice), the lazy update is Adam's, weight decay included."""
    index = torch.tensor([0, 1, 2, 3, 4, 5, 2, 0])
    a_rows, a_dense = _tables()
    b_rows, b_dense = _tables()
    adam = torch.optim.Adam([a_rows, a_dense], lr=0.05, weight_decay=0.01)
    lazy = LazyAdam(_groups(b_rows, b_dense), lr=0.05, weight_decay=0.01)
    for _ in range(5):
        for opt, rows, dense, sparse in ((adam, a_rows, a_dense, False), (lazy, b_rows, b_dense, True)):
            opt.zero_grad()
            _loss(rows, dense, index, sparse).backward()
            opt.step()
    assert b_rows.grad is not None and b_rows.grad.is_sparse  # handed back after the step
    torch.testing.assert_close(b_rows, a_rows, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(b_dense, a_dense, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(lazy.state[b_rows]["exp_avg_sq"], adam.state[a_rows]["exp_avg_sq"])


def test_rows_not_read_keep_value_and_moments() -> None:
    rows, dense = _tables()
    opt = LazyAdam(_groups(rows, dense), lr=0.05)
    for index in (torch.tensor([0, 1, 2, 3, 4, 5]), torch.tensor([1, 4])):
        before = rows.detach().clone()
        m_before = opt.state[rows]["exp_avg"].clone() if opt.state[rows] else torch.zeros_like(rows)
        opt.zero_grad()
        _loss(rows, dense, index, True).backward()
        opt.step()
    untouched = torch.tensor([0, 2, 3, 5])
    assert torch.equal(rows.detach()[untouched], before[untouched])
    assert torch.equal(opt.state[rows]["exp_avg"][untouched], m_before[untouched])
    assert not torch.equal(rows.detach()[1], before[1]) and not torch.equal(rows.detach()[4], before[4])
    assert float(opt.state[rows]["step"]) == 2.0


def test_a_dense_gradient_takes_the_same_rows_as_a_sparse_one() -> None:
    """DDP hands the row tables dense gradients: the rows with a nonzero gradient move, as with the
    sparse gradient of one process; a row read with a zero gradient does not move in either."""
    index = torch.tensor([1, 4, 4])
    out = []
    for sparse in (True, False):
        rows, dense = _tables()
        opt = LazyAdam(_groups(rows, dense), lr=0.05, weight_decay=0.01)
        for _ in range(3):
            opt.zero_grad()
            # row 2 is read with a zero weight: a zero gradient
            (
                _loss(rows, dense, index, sparse)
                + 0 * F.embedding(torch.tensor([2]), rows, sparse=sparse).sum()
            ).backward()
            opt.step()
        out.append((rows.detach().clone(), opt.state[rows]["exp_avg"].clone()))
    (a, ma), (b, mb) = out
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    torch.testing.assert_close(ma, mb, rtol=0, atol=0)
    assert torch.equal(a[2], _tables()[0].detach()[2]) and not torch.equal(a[1], _tables()[0].detach()[1])


def test_state_dict_resumes_exactly() -> None:
    """Three steps, a checkpoint round trip (torch.save, weights_only load), three more: the six steps'
    values, bit for bit."""

    def steps(opt: LazyAdam, rows: torch.Tensor, dense: torch.Tensor, ks: range) -> None:
        for k in ks:
            opt.zero_grad()
            _loss(rows, dense, torch.tensor([k % 6, (k + 3) % 6]), True).backward()
            opt.step()

    rows, dense = _tables()
    whole = LazyAdam(_groups(rows, dense), lr=0.05)
    steps(whole, rows, dense, range(6))

    first_rows, first_dense = _tables()
    first = LazyAdam(_groups(first_rows, first_dense), lr=0.05)
    steps(first, first_rows, first_dense, range(3))
    buf = io.BytesIO()
    torch.save({"opt": first.state_dict(), "rows": first_rows.detach(), "dense": first_dense.detach()}, buf)
    buf.seek(0)
    ckpt = torch.load(buf, weights_only=True)
    r, d = torch.nn.Parameter(ckpt["rows"]), torch.nn.Parameter(ckpt["dense"])
    resumed = LazyAdam(_groups(r, d), lr=0.05)
    resumed.load_state_dict(ckpt["opt"])
    steps(resumed, r, d, range(3, 6))
    assert torch.equal(r, rows) and torch.equal(d, dense)


def test_closure_is_run_once_and_its_loss_returned() -> None:
    rows, dense = _tables()
    opt = LazyAdam(_groups(rows, dense), lr=0.05)
    calls = []

    def closure() -> torch.Tensor:
        calls.append(1)
        opt.zero_grad()
        loss = _loss(rows, dense, torch.tensor([0, 5]), True)
        loss.backward()
        return loss

    loss = opt.step(closure)
    assert len(calls) == 1 and torch.is_tensor(loss) and torch.isfinite(loss)
