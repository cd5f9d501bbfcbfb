"""The Nomad listings a snapshot is made of, and the latest answer of each watch on them."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

# The service's watches ask exactly these, so that a
# pass can take what a watch last fetched instead of asking again (see Listings).
NODES = "nomad-nodes"
JOBS = "nomad-jobs"
ALLOCATIONS = "nomad-allocations"
LISTINGS: dict[str, tuple[str, dict[str, str]]] = {
    NODES: ("/v1/nodes", {}),
    # meta: each stub carries its job's Meta (Nomad 1.7+; older servers leave it out), so a
    # job that was only stopped needs no second read.
    JOBS: ("/v1/jobs", {"prefix": "llm-", "meta": "true"}),
    ALLOCATIONS: (
        "/v1/allocations",
        {"resources": "true", "namespace": "*", "task_states": "false"},
    ),
}


@dataclass(frozen=True)
class Listing:
    """One listing as Nomad answered it: body, X-Nomad-Index, and when it was asked for."""

    body: Any
    index: int
    asked_at: float  # time.monotonic() when the request went out
    got_at: float  # ... and when the answer came


class Listings:
    """The latest answer of each Nomad watch (a blocking query on a listing).

    A watch is answered as soon as its listing changes and asks again at once, so its latest
    answer is the listing as Nomad has it, short of a change on its way back, which wakes
    another pass anyway. A pass that takes it saves a round trip and Nomad the work of
    answering twice: under churn, and with a slow Nomad, that is most of a pass. A watch that
    failed forgets its answer, and one whose question has been open longer than `max_age_s`
    (its HTTP timeout: a hung connection) is not used: the pass reads.
    """

    def __init__(self, max_age_s: float) -> None:
        self.max_age_s = max_age_s
        self._lock = threading.Lock()
        self._latest: dict[str, Listing] = {}
        self._asking: dict[str, float] = {}  # name -> when its open question went out

    def asking(self, name: str, since: float) -> None:
        with self._lock:
            self._asking[name] = since

    def put(self, name: str, listing: Listing) -> None:
        with self._lock:
            self._latest[name] = listing

    def forget(self, name: str) -> None:
        with self._lock:
            self._latest.pop(name, None)

    def fresh(self, name: str, asked_after: float) -> Listing | None:
        """The latest answer, unless it is too old or was asked for before `asked_after`."""
        with self._lock:
            listing = self._latest.get(name)
            open_since = self._asking.get(name, 0.0)
        if listing is None or listing.asked_at < asked_after:
            return None
        if time.monotonic() - max(open_since, listing.got_at) > self.max_age_s:
            return None
        return listing
