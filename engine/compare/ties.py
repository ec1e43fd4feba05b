"""When two rows of a comparison cannot be told apart. On a small validation set one image moves a top-1 by
several points (1.25 on 80 images) and seeds move it more, so a rank is only given where the data supports it.

The rule, stated in the table's footer and in docs/compare.md: rows are ranked by the mean of the ranked score;
a row is tied with the first row of its group (the best row not tied with the one before it) when
- both have two seeds or more and their mean +- std intervals overlap, or
- either has one seed and its score lies inside the Wilson 95 % interval of the group leader's score on the
  val images (the spread a binomial count on that many images allows).
Tied rows share the leader's rank, marked "=" ("=1", "=1", 3, ...)."""

from pretexts.engine.measures.reference import percent_interval

RULE = (
    "'=' marks a tie with the row ranked first in its group: mean +- std over the seeds overlapping (2+ seeds), "
    "or with one seed the score inside the leader's Wilson 95% interval on the {val} val images."
)


def tied(leader: tuple, other: tuple, leader_seeds: int, other_seeds: int, val_images: int) -> bool:
    """Whether `other` (mean, std) cannot be told from `leader` (mean, std) under the rule above."""
    if leader_seeds >= 2 and other_seeds >= 2:
        return abs(leader[0] - other[0]) <= leader[1] + other[1]
    low, high = percent_interval(leader[0], val_images)
    return low <= other[0] <= high


def tie_ranks(rows: list[dict], rank_by: str, val_images: int) -> list[str]:
    """The rank of each of `rows` (already best first, one per arm): 'N', or '=N' when tied with the leader of
    rank N. A row without the ranked score gets '-'."""
    ranks, leader, leader_rank = [], None, 0
    for position, row in enumerate(rows, 1):
        score = row.get(rank_by)
        if score is None:
            ranks.append("-")
            continue
        if leader is not None and tied(leader[rank_by], score, leader["seeds"], row["seeds"], val_images):
            ranks.append(f"={leader_rank}")
            if not ranks[leader_rank - 1].startswith("="):
                ranks[leader_rank - 1] = f"={leader_rank}"
            continue
        leader, leader_rank = row, position
        ranks.append(str(position))
    return ranks
