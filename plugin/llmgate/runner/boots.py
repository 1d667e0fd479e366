"""An entry's measurement boots: how many (K, from ``--llmgate-boots``, the entry's ``boots``, A/B
mode) and which one a test measures.  Decided once, where tests are parametrized
(``plugin.pytest_generate_tests``), and passed down as the value of the ``llmgate_boot``
parameter; the pool is given the A/B sides when it is made.  Nothing below asks back up."""

from __future__ import annotations

import dataclasses

from llmgate.config.matrix import ServerConfig
from llmgate.runner.settings import Settings

Sides = tuple[tuple[str, str], ...]      # A/B mode's (name, launcher) pairs, baseline first; () otherwise


def side_of(sides: Sides, k: int) -> tuple[str, str, int] | None:
    """A/B mode: measurement boot k's side (name, launcher) and its round on that side (boots
    alternate A B A B …); None otherwise."""
    if not sides:
        return None
    name, launcher = sides[(k - 1) % len(sides)]
    return name, launcher, (k - 1) // len(sides) + 1


def boot_config(cfg: ServerConfig, sides: Sides, k: int) -> tuple[ServerConfig, str | None]:
    """The configuration measurement boot k boots (its side's launcher in A/B mode) and the side."""
    side = side_of(sides, k)
    if side is None:
        return cfg, None
    return dataclasses.replace(cfg, launcher=side[1]), side[0]


@dataclasses.dataclass(frozen=True)
class EntryBoots:
    """The measurement boots of one entry in this session: ``per_side`` (K) boots, or in A/B mode K
    a side, alternating between ``sides``."""
    per_side: int
    sides: Sides = ()

    @classmethod
    def decide(cls, settings: Settings, cfg: ServerConfig) -> EntryBoots:
        """K for ``cfg``: ``--llmgate-boots``, else the entry's ``boots``, else 3 on a GPU and 1 on the
        CPU (but 3 in A/B mode: an A/B comparison of one boot a side sees nothing)."""
        if settings.boots is not None:
            k = settings.boots
        elif cfg.boots is not None:
            k = cfg.boots
        else:
            k = 3 if cfg.device == "gpu" or settings.ab else 1
        return cls(k, settings.ab)

    @property
    def total(self) -> int:
        """All the entry's measurement boots: K, or K a side in A/B mode."""
        return self.per_side * (len(self.sides) or 1)

    def side(self, k: int) -> tuple[str, str, int] | None:
        return side_of(self.sides, k)

    def config(self, cfg: ServerConfig, k: int) -> tuple[ServerConfig, str | None]:
        return boot_config(cfg, self.sides, k)

    def test_id(self, cfg: ServerConfig, k: int) -> str:
        """The id of boot k's test: ENTRY-bootK, in A/B mode ENTRY-bootK.SIDE (store.keys.stored_key
        reads it), or ENTRY alone where the entry has one boot."""
        side = self.side(k)
        if side is not None:
            return f"{cfg.id}-boot{k}.{side[0]}"
        return cfg.id if self.total == 1 else f"{cfg.id}-boot{k}"

    def boots(self) -> list[MeasurementBoot]:
        return [MeasurementBoot(k, self) for k in range(1, self.total + 1)]


class MeasurementBoot(int):
    """The value of the ``llmgate_boot`` parameter: k, the measurement boot a test measures (an
    int, 1-based), with the entry's ``plan`` it belongs to (``of``: K in all; ``side``: A/B mode's
    side, its launcher and its round on that side)."""
    plan: EntryBoots

    def __new__(cls, k: int, plan: EntryBoots) -> MeasurementBoot:
        boot = super().__new__(cls, k)
        boot.plan = plan
        return boot

    def __getnewargs__(self) -> tuple[int, EntryBoots]:  # type: ignore[override]
        # copy and pickle make it again from k and its plan
        return int(self), self.plan

    @property
    def of(self) -> int:
        return self.plan.total

    @property
    def side(self) -> tuple[str, str, int] | None:
        return self.plan.side(int(self))
