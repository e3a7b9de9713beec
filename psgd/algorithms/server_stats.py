"""What the server records: one Service per sync served, and the ServerStats
of a run() (counts, time shares, the staleness histogram)."""
import collections
import dataclasses


Service = collections.namedtuple("Service", "rank n_k order reply arrived staleness")
Service.__doc__ = """One MSG_SYNC served. `order`: syncs served before it (= the
center's update count before this update); `reply`: the update count of the
center the worker got back (easgd: order, the center before the update, or less
when the sync was served in the background, in_flight.py; asgd and masgd: order +
1, or the release count when a barrier held the reply);
`arrived`: syncs served when the server first saw the control message;
`staleness`: center updates between the center the worker last got back (its
previous `reply`, 0 before its first sync) and this update (order - that)."""


@dataclasses.dataclass
class ServerStats:
    syncs: int = 0          # MSG_SYNC served
    samples: int = 0        # sum of the n_k the workers reported
    finished: int = 0       # workers that sent MSG_FINISHED
    busy_s: float = 0.0     # serving: exchanges and updates
    idle_s: float = 0.0     # waiting for a control message
    idle_cpu_s: float = 0.0  # process CPU time of those waits (spins, wake-ups)
    wall_s: float = 0.0     # the whole run()
    cpu_s: float = 0.0      # process CPU time during run(): low when idle waits sleep
    sleeps: int = 0         # sleeps taken in idle waits
    per_worker: dict = dataclasses.field(default_factory=dict)  # rank -> [syncs, samples]
    staleness: list = dataclasses.field(default_factory=list)   # [i]: syncs of staleness i

    def as_dict(self):
        return dataclasses.asdict(self)

    def count_staleness(self, tau):
        if tau >= len(self.staleness):
            self.staleness.extend([0] * (tau + 1 - len(self.staleness)))
        self.staleness[tau] += 1

    @property
    def staleness_mean(self):
        return staleness_mean(self.staleness)

    @property
    def staleness_max(self):
        return staleness_max(self.staleness)


def staleness_mean(histogram):
    """The mean staleness of a histogram ([i]: syncs of staleness i); 0 when empty."""
    total = sum(histogram)
    return sum(i * c for i, c in enumerate(histogram)) / total if total else 0.0


def staleness_max(histogram):
    """The largest staleness a histogram holds; 0 when empty."""
    return max((i for i, c in enumerate(histogram) if c), default=0)
