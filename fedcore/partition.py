"""Split a training set's indices among federated clients.

Each scheme takes the training labels, the number of clients K and a
``torch.Generator`` (the only source of randomness), and returns one int64 CPU
tensor of indices per client, sorted, such that every training index is held by
exactly one client.

Sources:
  McMahan et al. 2017, "Communication-Efficient Learning of Deep Networks from
      Decentralized Data" (AISTATS): ``iid`` and ``shards`` (Sec. 3).
  Nagura et al., FedNNNN: unbalanced "UB" and "non-IID-UB" splits
      (``power_law``).
  Acar et al. 2021, "Federated Learning Based on Dynamic Regularization"
      (FedDyn, ICLR), as followed by the FedUmf appendix: ``lognormal`` and
      ``dirichlet``.
"""

import math

import numpy as np
import torch

from fedcore.errors import ConfigError


def iid(labels, num_clients, *, generator):
    """McMahan et al. 2017 "IID": shuffle, then cut into K equal parts.

    60000 MNIST examples over 100 clients gives 600 each. When n is not
    divisible by K, the first n % K clients get one example more.
    """
    labels = _checked(labels, num_clients)
    order = torch.randperm(len(labels), generator=generator)
    return _split(order, _equal_sizes(len(labels), num_clients))


def shards(labels, num_clients, *, shards_per_client=2, generator):
    """McMahan et al. 2017 pathological non-IID split.

    Sort the examples by label, cut them into K * s equal shards (MNIST: 200
    shards of 300 for K=100, s=2) and give each client s shards drawn at random
    without replacement. The sort is stable so the shards depend only on the
    labels.
    """
    labels = _checked(labels, num_clients)
    if shards_per_client < 1:
        raise ConfigError(f"--shards-per-client must be >= 1, got {shards_per_client}")
    n, num_shards = len(labels), num_clients * shards_per_client
    flags = f"--clients {num_clients} x --shards-per-client {shards_per_client}"
    if n < num_shards:
        raise ConfigError(
            f"shards: {n} training examples are too few for {num_shards} non-empty "
            f"shards ({flags}); use fewer clients or shards per client"
        )
    if n % num_shards:
        raise ConfigError(
            f"shards: {n} training examples cannot be cut into {num_shards} equal "
            f"shards ({flags}); use a size divisible by {num_shards}"
        )
    by_label = torch.sort(labels, stable=True).indices
    shard_list = by_label.view(num_shards, n // num_shards)
    picks = torch.randperm(num_shards, generator=generator).view(num_clients, shards_per_client)
    return [shard_list[p].flatten().sort().values for p in picks]


def power_law(labels, num_clients, *, exponent=1.0, classes_per_client=0, generator):
    """FedNNNN (Nagura et al.) "UB" / "non-IID-UB" unbalanced split.

    The paper says client dataset sizes "follow a power-law distribution, where
    a small number of clients hold most of the training images", without the
    law's parameters. We use Zipf's law: the client of rank r = 1..K gets a
    share proportional to r ** -exponent, ranks dealt to clients at random,
    rounded by largest remainder. The default exponent 1.0 is plain Zipf, the
    parameter-free power law, and matches the paper's wording: with K=100 the
    10 largest clients hold ~56% of the data ("most"), while the smallest
    still holds ~0.2% (116 MNIST images), so no client is near-empty.

    classes_per_client=0 ("UB"): IID content, sizes exactly as above.

    classes_per_client=c > 0 ("non-IID-UB", the paper uses c=2): each client
    holds c distinct classes, each class held by floor or ceil of K*c/C
    clients; a class's examples are divided among its holders in proportion to
    their power-law weights. Client sizes thus only approximately follow the
    power law: the largest clients are capped by the size of their classes
    (MNIST, K=100: the largest holds ~7000 images instead of ~11600).
    Departure: each holder gets at least one example of each of its classes,
    so every client holds exactly c classes.
    """
    labels = _checked(labels, num_clients)
    if exponent < 0:
        raise ConfigError(f"--power-law-exponent must be >= 0, got {exponent}")
    if classes_per_client < 0:
        raise ConfigError(f"--classes-per-client must be >= 0, got {classes_per_client}")
    n = len(labels)
    weight_by_rank = torch.arange(1, num_clients + 1, dtype=torch.float64) ** -exponent
    rank = torch.randperm(num_clients, generator=generator)
    weights = weight_by_rank[rank]
    if classes_per_client:
        return _power_law_by_class(labels, weights, classes_per_client, generator)
    size_by_rank = _apportion(weight_by_rank, n)
    if size_by_rank.min() == 0:
        raise ConfigError(
            f"power_law: with --clients {num_clients} and --power-law-exponent "
            f"{exponent} the smallest client would get 0 of {n} training examples; "
            f"use fewer clients or a smaller exponent"
        )
    order = torch.randperm(n, generator=generator)
    return _split(order, size_by_rank[rank])


def _power_law_by_class(labels, weights, classes_per_client, generator):
    """The non-IID-UB half of ``power_law``: c classes per client."""
    num_clients, c = len(weights), classes_per_client
    classes, class_sizes = torch.unique(labels, return_counts=True)
    num_classes = len(classes)
    if c > num_classes:
        raise ConfigError(
            f"--classes-per-client must be <= the {num_classes} classes in the data, got {c}"
        )
    if num_clients * c < num_classes:
        raise ConfigError(
            f"power_law: --clients {num_clients} x --classes-per-client {c} = "
            f"{num_clients * c} class slots cannot cover all {num_classes} classes; "
            f"use more clients or classes per client"
        )
    # Spread the K*c class slots evenly; which classes get the spare slots is random.
    holders_left = _equal_sizes(num_clients * c, num_classes)[
        torch.randperm(num_classes, generator=generator)
    ]
    # Each client takes the c classes with most slots left, ties broken at
    # random. Taking the fullest classes first never gets stuck: no class ever
    # needs more holders than there are clients left (Gale-Ryser).
    held = torch.zeros(num_clients, num_classes, dtype=torch.bool)
    for k in range(num_clients):
        score = holders_left + torch.rand(num_classes, generator=generator, dtype=torch.float64)
        chosen = score.topk(c).indices
        held[k, chosen] = True
        holders_left[chosen] -= 1

    parts = [[] for _ in range(num_clients)]
    by_class = _shuffled_by_class(labels, generator).split(class_sizes.tolist())
    for j, examples in enumerate(by_class):
        holders = held[:, j].nonzero().flatten()
        if len(examples) < len(holders):
            raise ConfigError(
                f"power_law: class {int(classes[j])} has {len(examples)} training "
                f"examples, too few for its {len(holders)} clients (--clients "
                f"{num_clients} x --classes-per-client {c}); use fewer clients"
            )
        sizes = 1 + _apportion(weights[holders], len(examples) - len(holders))
        for k, chunk in zip(holders.tolist(), examples.split(sizes.tolist())):
            parts[k].append(chunk)
    return [torch.cat(p).sort().values for p in parts]


def lognormal(labels, num_clients, *, sigma=0.3, generator):
    """FedDyn (Acar et al. 2021) unbalanced split, as in the FedUmf appendix.

    Sizes are drawn from lognormal(log(n/K), sigma), scaled to sum to n with
    largest-remainder rounding; content is IID. Departure: each client first
    gets one example and only the other n - K are split by the draws, so no
    client can be empty.
    """
    labels = _checked(labels, num_clients)
    if sigma <= 0:
        raise ConfigError(
            f"--lognormal-sigma must be > 0, got {sigma} (use --partition iid for equal sizes)"
        )
    n = len(labels)
    # The mean only scales the draws, which are normalized; it is kept to match the paper.
    draws = torch.empty(num_clients, dtype=torch.float64).log_normal_(
        math.log(n / num_clients), sigma, generator=generator
    )
    sizes = 1 + _apportion(draws, n - num_clients)
    return _split(torch.randperm(n, generator=generator), sizes)


def dirichlet(labels, num_clients, *, alpha=0.6, generator):
    """FedDyn (Acar et al. 2021) Dirichlet label skew, as in the FedUmf appendix.

    Clients get equal sizes (as in ``iid``) and class proportions
    p_k ~ Dir(alpha). As in FedDyn's code, each example slot draws a class from
    p_k restricted to classes that still have examples, then takes an unused
    example of it. FedDyn visits slots one at a time in random order; we
    instead let every unfilled slot draw at once, grant each class's
    oversubscribed requests to a random subset, and redraw the rest, which ends
    in at most C + 1 rounds.
    """
    labels = _checked(labels, num_clients)
    if alpha <= 0:
        raise ConfigError(f"--dirichlet-alpha must be > 0, got {alpha}")
    num_classes = int(labels.max()) + 1
    # torch samples no Gamma/Dirichlet from a Generator; numpy's handles tiny alpha well.
    rng = np.random.default_rng(int(torch.randint(2**62, (), generator=generator)))
    prior = torch.from_numpy(rng.dirichlet(np.full(num_classes, alpha), size=num_clients))

    by_class = _shuffled_by_class(labels, generator)
    supply = torch.bincount(labels, minlength=num_classes)
    next_unused = _starts(supply)  # position in by_class of each class's next unused example
    need = _equal_sizes(len(labels), num_clients)
    owners, taken = [], []
    while need.sum() > 0:
        available = supply > 0
        p = prior * available
        # A prior can be ~0 on every class left; then draw uniformly among them.
        p = torch.where(p.sum(1, keepdim=True) > 0, p, available.double().expand_as(p))
        draws = torch.multinomial(p, int(need.max()), replacement=True, generator=generator)
        cls = draws[torch.arange(draws.shape[1]) < need[:, None]]
        client = torch.arange(num_clients).repeat_interleave(need)
        # Shuffle the requests, group them by class keeping that random order,
        # and let each class serve its first `supply` requests.
        order = torch.randperm(len(cls), generator=generator)
        cls, client = cls[order], client[order]
        grouped = torch.sort(cls, stable=True).indices
        cls, client = cls[grouped], client[grouped]
        rank = torch.arange(len(cls)) - _starts(torch.bincount(cls, minlength=num_classes))[cls]
        granted = rank < supply[cls]
        cls, client, rank = cls[granted], client[granted], rank[granted]
        owners.append(client)
        taken.append(by_class[next_unused[cls] + rank])
        served = torch.bincount(cls, minlength=num_classes)
        next_unused += served
        supply -= served
        need -= torch.bincount(client, minlength=num_clients)
    owners, taken = torch.cat(owners), torch.cat(taken)
    return [taken[owners == k].sort().values for k in range(num_clients)]


SCHEMES = {
    "iid": iid,
    "shards": shards,
    "power_law": power_law,
    "lognormal": lognormal,
    "dirichlet": dirichlet,
}


def make(name, labels, num_clients, *, generator, **params):
    """Run the scheme called ``name`` with its own keyword ``params``."""
    if name not in SCHEMES:
        raise ConfigError(f"--partition must be one of {', '.join(SCHEMES)}; got {name!r}")
    return SCHEMES[name](labels, num_clients, generator=generator, **params)


def class_counts(labels, parts, num_classes):
    """Int64 tensor [K, C]: how many examples of each class each client holds."""
    labels = labels.cpu()
    return torch.stack([torch.bincount(labels[p], minlength=num_classes) for p in parts])


def _checked(labels, num_clients):
    """Validate --clients against the data; return the labels on the CPU."""
    labels = labels.cpu()
    if num_clients < 1:
        raise ConfigError(f"--clients must be >= 1, got {num_clients}")
    if num_clients > len(labels):
        raise ConfigError(
            f"--clients must be <= the {len(labels)} training examples, got {num_clients}"
        )
    return labels


def _equal_sizes(total, parts):
    """Sizes of ``parts`` near-equal parts of ``total``; the first total % parts get one more."""
    sizes = torch.full((parts,), total // parts, dtype=torch.int64)
    sizes[: total % parts] += 1
    return sizes


def _apportion(weights, total):
    """Split the integer ``total`` in proportion to ``weights`` (largest remainder).

    Every part gets the floor of its quota, then the parts with the largest
    fractional remainders get one more (ties to the lower index), so the parts
    sum to ``total`` and each is within 1 of its quota.
    """
    quota = weights / weights.sum() * total
    sizes = quota.floor().long()
    by_remainder = torch.argsort(quota - sizes, descending=True, stable=True)
    sizes[by_remainder[: total - int(sizes.sum())]] += 1
    return sizes


def _shuffled_by_class(labels, generator):
    """All indices grouped by class (ascending), in random order within each class."""
    order = torch.randperm(len(labels), generator=generator)
    return order[torch.sort(labels[order], stable=True).indices]


def _starts(counts):
    """Where each group starts when groups of ``counts`` are laid end to end."""
    return counts.cumsum(0) - counts


def _split(order, sizes):
    """Cut ``order`` into consecutive parts of ``sizes``, each sorted."""
    return [part.sort().values for part in order.split(sizes.tolist())]
