""":class:`Resolved`, the pipeline's view of one validated config: one class composed of the
per-section resolvers of this package."""

from __future__ import annotations

from collections.abc import Callable

from causalpos.config.checks import ChecksSection
from causalpos.config.claims import ClaimsSection
from causalpos.config.datasets import DatasetsSection
from causalpos.config.extract import ExtractSection
from causalpos.config.families import FamiliesSection
from causalpos.config.figures import FiguresSection
from causalpos.config.leakage import LeakageSection
from causalpos.config.models import ModelsSection
from causalpos.config.paper1 import Paper1Section
from causalpos.config.plants import PlantSection
from causalpos.config.report import ReportSection
from causalpos.config.resources import ResourcesSection
from causalpos.config.shapes import ShapesSection
from causalpos.config.simulate import SimulateSection
from causalpos.config.targets import TargetsSection
from causalpos.config.train import TrainSection


class Resolved(
    SimulateSection,
    FiguresSection,
    ModelsSection,
    DatasetsSection,
    ExtractSection,
    Paper1Section,
    TrainSection,
    LeakageSection,
    PlantSection,
    TargetsSection,
    ResourcesSection,
    FamiliesSection,
    ReportSection,
    ClaimsSection,
    ChecksSection,
    ShapesSection,
):
    """The pipeline's view of one validated config (nothing is cached but the corpora's document
    sizes: the dict is read on each call, as Snakemake's input functions would)."""

    def __init__(
        self,
        config: dict,
        *,
        document_sizes: Callable[[dict], list[int] | None] | None = None,
        content_sha256: Callable[[list[str]], dict[str, str]] | None = None,
    ) -> None:
        self.config = config
        # the config-time checks' readers (ChecksSection; tests pass their own)
        self._document_sizes = document_sizes
        self._sizes = {}
        self._content_sha256 = content_sha256
