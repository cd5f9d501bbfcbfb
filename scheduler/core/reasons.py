"""Why a profile did not fit, as plans say it: counts per filter name and the sentence.

`ProfileTrial.short` counts by filter name (the contract: "gpu-count": 12), `reasons` keeps
each filter's words with their nodes, and `pending` says it all in one sentence, by words
("12 too few free GPUs"), as operators read it.
"""

from __future__ import annotations

from scheduler.core.models import Profile, ProfileTrial
from scheduler.core.plugins import Reason


def describe(p: Profile) -> str:
    if p.mig_profile is not None:
        return f"a free {p.mig_profile} slice"
    what = f"{p.gpus} free GPU{'s' if p.gpus != 1 else ''}"
    if p.gpu_models:
        what += " matching " + "/".join(p.gpu_models)
    if p.gpu_memory_gb is not None:
        what += f" with {p.gpu_memory_gb:g} GB"
    return what


def sentence(profile: Profile, n_fits: int, texts: dict[str, int], apart: str | None = None) -> str:
    """The `pending` sentence of one profile; `texts`: nodes per filter sentence; `apart`:
    why the `n_fits` feasible nodes hold no group that `required` locality accepts."""
    total = sum(texts.values())
    order = sorted(texts.items(), key=lambda kv: (-kv[1], kv[0]))
    parts = ", ".join(f"{r} on {n} node{'s' if n != 1 else ''}" for r, n in order)
    if apart is not None:
        nodes = f"{n_fits} node{'s' if n_fits != 1 else ''} {'have' if n_fits != 1 else 'has'}"
        text = f"profile {profile.name}: {nodes} {describe(profile)}, {apart}"
    elif profile.shards > 1:
        text = (
            f"profile {profile.name}: only {n_fits} of {profile.shards} distinct nodes "
            f"have {describe(profile)}"
        )
    elif profile.is_mig:
        text = f"profile {profile.name}: no free {profile.mig_profile} slice"
    else:
        text = f"profile {profile.name}: no node has {describe(profile)}"
    if len(texts) == 1 and order[0][0] in text:  # the headline already says why
        text += " on " + ("the only node" if total == 1 else f"any of {total} nodes")
    elif total:
        text += f" ({parts})"
    return text


class Refusals:
    """What a placing walk met on the nodes it visited that passed the static filters and
    still said no: nodes per Reason (for the sentence), and the nodes whose "no" was
    unresolvable (where preemption need not try)."""

    def __init__(self) -> None:
        self.counts: dict[Reason, int] = {}
        self.never: set[str] = set()

    def add(self, node_id: str, said: Reason) -> None:
        self.counts[said] = self.counts.get(said, 0) + 1
        if said.unresolvable:
            self.never.add(node_id)

    def clear(self) -> None:
        self.counts.clear()
        self.never.clear()


def explained(
    profile: Profile, n_fits: int, counts: dict[Reason, int], apart: str | None = None
) -> tuple[ProfileTrial, str]:
    """The trial (counts by filter name, words by filter) and the sentence (by words)."""
    short: dict[str, int] = {}
    reasons: dict[str, dict[str, int]] = {}
    texts: dict[str, int] = {}
    unresolvable: set[str] = set()
    for (name, text, never), n in sorted(counts.items()):
        if never:
            unresolvable.add(name)
        short[name] = short.get(name, 0) + n
        reasons.setdefault(name, {})[text] = n
        texts[text] = texts.get(text, 0) + n
    trial = ProfileTrial(
        profile=profile.name, short=short, reasons=reasons, unresolvable=sorted(unresolvable)
    )
    return trial, sentence(profile, n_fits, texts, apart)
