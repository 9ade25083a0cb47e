"""Emulated storage tiers: each L2 tier path on a block device of its own, its bandwidth capped by the kernel.

A tier path becomes the mount point of an ext4 file system in an image file beside it (`<path>.img`), attached
to a loop device in direct-I/O mode (`losetup --direct-io=on`: the loop driver reads the image with O_DIRECT, so
the page cache of the disk under it serves nothing), and the loop device's read and write bandwidth (and, if
configured, IOPS) are capped by the kernel's block throttle for every process of one cgroup: cgroup v1
`blkio.throttle.{read,write}_{bps,iops}_device` or cgroup v2 `io.max`, on the loop device's major:minor.

`Emulation` sets the devices and the cgroup up, runs a command inside the cgroup (its children inherit it: vLLM,
LMCache, fio), and tears everything down when the command ends, fails or is interrupted: no mount, loop device
or cgroup is left behind. The image files are kept: they hold the tier's data from one job to the next, as a disk
would (`remove_images` deletes them). Each resource is written to a state file as it is taken, so that
`teardown(state)` frees what a killed process could not (`kvtier emulate down`).

Not emulated: latency (device-mapper's delay target is absent from the kernels this runs on, so a device's
latency is the loop device's own, microseconds, not a network's); under cgroup v1, buffered writes (they reach the
device from the kernel's flusher threads, outside the cgroup: only direct writes are capped); the loop device's
own queue (one worker per device).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..core.atomic import write_text
from ..core.errors import KvtierError

TOOLS = ("losetup", "mkfs.ext4", "mount", "umount")
LOOP_CONTROL = Path("/dev/loop-control")
CGROUP_V1 = Path("/sys/fs/cgroup/blkio")
CGROUP_V2 = Path("/sys/fs/cgroup")
CGROUP_PREFIX = "kvtier-emulated-"
# The environment variable a command run inside the emulation finds its caps in (platform records read it).
ENV_CAPS = "KVTIER_EMULATED_TIERS"
# The environment variable the workflow sets on every job when the config's emulation is on: what to emulate
# ({"state": FILE, "tiers": {tier: {path, size, read, write, ...}}}); each measuring command sets it up around
# itself (`around_command`).
ENV_PLAN = "KVTIER_EMULATE"
DEFAULT_STATE = "pools/emulated.json"  # where an emulation records what it set up
# How far a read or write through an emulated device may come from its cap and still be the cap at work (G2 judges
# each path by it; R9's cold reads must stay under cap x (1 + it)).
CAP_TOLERANCE = 0.15

_RATE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(B|kB|MB|GB|KiB|MiB|GiB)/s\s*$")
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(MB|GB|MiB|GiB)\s*$")
_UNIT = {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def parse_rate(text: str, what: str = "rate") -> int:
    """Bytes per second from '200MB/s', '1.5 GB/s', '50MiB/s' (SI or binary prefixes); refuses other units and
    caps that are not positive, naming `what`."""
    match = _RATE.match(str(text))
    if not match:
        raise KvtierError(f"{what}: {text!r} is not a bandwidth: a number and one of "
                          f"{', '.join(u + '/s' for u in _UNIT)} (e.g. 200MB/s)")
    value = int(float(match.group(1)) * _UNIT[match.group(2)])
    if value <= 0:
        raise KvtierError(f"{what}: {text!r} must be more than 0")
    return value


def parse_size(text: str, what: str = "size") -> int:
    """Bytes from '512MiB', '2GiB', '4GB'."""
    match = _SIZE.match(str(text))
    if not match:
        raise KvtierError(f"{what}: {text!r} is not a size: a number and one of MB, GB, MiB, GiB (e.g. 2GiB)")
    value = int(float(match.group(1)) * _UNIT[match.group(2)])
    if value < 32 << 20:
        raise KvtierError(f"{what}: {text!r} is under 32 MiB, too small for an ext4 image")
    return value


@dataclass(frozen=True)
class Device:
    """One emulated tier: its path (the mount point) and the caps on its device."""
    name: str
    path: str
    size_bytes: int
    read_bps: int
    write_bps: int
    read_iops: int | None = None
    write_iops: int | None = None

    @property
    def image(self) -> Path:
        path = Path(self.path)
        return path.with_name(path.name + ".img")

    @classmethod
    def from_config(cls, name: str, path: str, entry: dict) -> Device:
        """From a config entry {size, read, write, read_iops?, write_iops?} (units as written: '2GiB', '200MB/s')."""
        where = f"emulation.tiers.{name}"
        unknown = set(entry) - {"size", "read", "write", "read_iops", "write_iops"}
        if unknown:
            raise KvtierError(f"{where}: unknown keys {sorted(unknown)}")
        missing = {"size", "read", "write"} - set(entry)
        if missing:
            raise KvtierError(f"{where}: missing {sorted(missing)}")
        iops = {}
        for key in ("read_iops", "write_iops"):
            value = entry.get(key)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
                raise KvtierError(f"{where}.{key}: {value!r} must be a positive integer")
            iops[key] = value
        return cls(name, str(path), parse_size(entry["size"], f"{where}.size"),
                   parse_rate(entry["read"], f"{where}.read"), parse_rate(entry["write"], f"{where}.write"), **iops)

    def caps(self) -> dict:
        return {"read_bps": self.read_bps, "write_bps": self.write_bps, "read_iops": self.read_iops,
                "write_iops": self.write_iops}


# ------------------------------------------------------------------------------------------------------------
# The kernel's block throttle, cgroup v1 or v2


class Throttle:
    """A cgroup whose processes' I/O to given devices is capped."""
    version = 0

    def __init__(self, root: Path):
        self.root = root

    def group(self, name: str) -> Path:
        return self.root / f"{CGROUP_PREFIX}{name}"

    def create(self, name: str) -> Path:
        group = self.group(name)
        group.mkdir(exist_ok=True)
        return group

    def cap(self, group: Path, dev: str, device: Device) -> None:
        raise NotImplementedError

    def in_force(self, group: Path) -> dict[str, dict]:
        raise NotImplementedError

    def join(self, group: Path, pid: int = 0) -> None:
        (group / "cgroup.procs").write_text(f"{pid or os.getpid()}\n")

    def members(self, group: Path) -> list[int]:
        try:
            return [int(p) for p in (group / "cgroup.procs").read_text().split()]
        except FileNotFoundError:
            return []

    def remove(self, group: Path) -> None:
        """Stop what is still inside (a server a killed command left running), then remove the group."""
        if not group.exists():
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            pids = [pid for pid in self.members(group) if pid != os.getpid()]
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + 10
            while self.members(group) and time.monotonic() < deadline:
                time.sleep(0.1)
        for _attempt in range(50):
            try:
                group.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.1)  # a process that just exited leaves the group a moment later
        raise KvtierError(f"cgroup {group}: could not be removed (still holds {self.members(group)})")


class BlkioV1(Throttle):
    version = 1
    FILES = {"read_bps": "blkio.throttle.read_bps_device", "write_bps": "blkio.throttle.write_bps_device",
             "read_iops": "blkio.throttle.read_iops_device", "write_iops": "blkio.throttle.write_iops_device"}

    def cap(self, group: Path, dev: str, device: Device) -> None:
        for key, value in device.caps().items():
            if value:
                (group / self.FILES[key]).write_text(f"{dev} {value}\n")

    def in_force(self, group: Path) -> dict[str, dict]:
        found: dict[str, dict] = {}
        for key, name in self.FILES.items():
            for line in (group / name).read_text().splitlines():
                dev, value = line.split()
                found.setdefault(dev, {})[key] = int(value)
        return found


class IoV2(Throttle):
    version = 2
    KEYS = {"read_bps": "rbps", "write_bps": "wbps", "read_iops": "riops", "write_iops": "wiops"}

    def create(self, name: str) -> Path:
        # The io controller must be on for the root's children before a child group can carry io.max.
        control = self.root / "cgroup.subtree_control"
        if "io" not in control.read_text().split():
            control.write_text("+io\n")
        return super().create(name)

    def cap(self, group: Path, dev: str, device: Device) -> None:
        limits = " ".join(f"{self.KEYS[k]}={v}" for k, v in device.caps().items() if v)
        (group / "io.max").write_text(f"{dev} {limits}\n")

    def in_force(self, group: Path) -> dict[str, dict]:
        found: dict[str, dict] = {}
        for line in (group / "io.max").read_text().splitlines():
            dev, *limits = line.split()
            values = dict(limit.split("=") for limit in limits)
            found[dev] = {k: int(values[v]) for k, v in self.KEYS.items() if values.get(v, "max") != "max"}
        return found


def throttle() -> Throttle | None:
    """The block throttle this machine offers a writable cgroup of, or None."""
    if (CGROUP_V1 / BlkioV1.FILES["read_bps"]).exists() and os.access(CGROUP_V1, os.W_OK):
        return BlkioV1(CGROUP_V1)
    controllers = CGROUP_V2 / "cgroup.controllers"
    if controllers.exists() and "io" in controllers.read_text().split() and os.access(CGROUP_V2, os.W_OK):
        return IoV2(CGROUP_V2)
    return None


def unavailable() -> str | None:
    """Why tiers cannot be emulated here (a sentence for G1 and the pages), or None."""
    if os.geteuid() != 0:
        return "needs root (loop devices, mounts and a cgroup's block throttle)"
    missing = [tool for tool in TOOLS if not shutil.which(tool)]
    if missing:
        return f"needs {', '.join(missing)} on PATH"
    if not LOOP_CONTROL.exists():
        return f"no loop devices ({LOOP_CONTROL} is absent: a container without them, or the loop module unloaded)"
    if throttle() is None:
        return ("no writable block throttle: neither cgroup v1 blkio.throttle nor cgroup v2's io controller "
                "can be written here")
    return None


# ------------------------------------------------------------------------------------------------------------
# Setting up and tearing down


def run_tool(argv: list[str]) -> str:
    """Run a system tool (losetup, mkfs.ext4, mount); its stdout, or an error naming the command and its stderr."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise KvtierError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()[-400:]}")
    return done.stdout.strip()


def _major_minor(loop: str) -> str:
    rdev = os.stat(loop).st_rdev
    return f"{os.major(rdev)}:{os.minor(rdev)}"


def _allocated(path: Path) -> int:
    try:
        return path.stat().st_blocks * 512
    except FileNotFoundError:
        return 0


class Emulation:
    """The devices and cgroup of a set of emulated tiers, named `name` (one cgroup per name), recorded in `state`
    (a JSON file) as they are taken."""

    def __init__(self, devices: list[Device], state: str | os.PathLike, name: str = "tiers"):
        if not devices:
            raise KvtierError("emulation: no tier to emulate")
        paths = [Path(d.path).resolve() for d in devices]
        if len(set(paths)) != len(paths):
            raise KvtierError(f"emulation: two tiers on one path ({[d.path for d in devices]})")
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            raise KvtierError(f"emulation name {name!r}: letters, digits, '_', '.', '-' only")
        self.devices, self.state, self.name = devices, Path(state), name
        self.record: dict = {"name": name, "cgroup": None, "cgroup_version": None, "devices": []}

    def _save(self) -> None:
        write_text(self.state, json.dumps(self.record, indent=1) + "\n")

    def check(self) -> None:
        """Refuse, before anything is made, what cannot work: no privileges, a device image larger than the free
        space beside it, a path that is not an empty directory."""
        why = unavailable()
        if why:
            raise KvtierError(f"emulated tiers: {why}")
        self.check_paths()

    def check_paths(self) -> None:
        """The checks that need no privileges: no emulation already up under this state file, every path an empty
        directory or absent, every image within the free space beside it."""
        if self.state.exists():
            raise KvtierError(f"{self.state}: an emulation is already up (or was left by a killed run); "
                              f"`kvtier emulate down --state {self.state}` frees it")
        need: dict[int, int] = {}  # bytes each file system must still give the images (they are sparse)
        for device in self.devices:
            path, image = Path(device.path), device.image
            if path.is_mount():
                raise KvtierError(f"{device.name}: something is already mounted at {path}")
            if path.exists() and (not path.is_dir() or any(path.iterdir())):
                raise KvtierError(f"{device.name}: {path} must be an empty directory (or absent) to mount the "
                                  "emulated device on; what a run without emulation left there (KV chunks a tier "
                                  f"run empties anyway) goes with: rm -r {shlex.quote(str(path))}")
            image.parent.mkdir(parents=True, exist_ok=True)
            volume = os.stat(image.parent).st_dev
            need[volume] = need.get(volume, 0) + device.size_bytes - _allocated(image)
            free = shutil.disk_usage(image.parent).free
            if need[volume] > free:
                raise KvtierError(f"{device.name}: its {device.size_bytes >> 20} MiB image (with the others on that "
                                  f"file system) does not fit in the {free >> 20} MiB free at {image.parent}")

    def up(self) -> dict:
        """Make (or reattach) every device, mount it at its path, and cap it in the cgroup; returns the record."""
        self.check()
        control = throttle()
        self.record.update(cgroup_version=control.version)
        self._save()
        try:
            for device in self.devices:
                entry = {"name": device.name, "path": str(Path(device.path).resolve()), "given_path": device.path,
                         "image": str(device.image.resolve()), "loop": None, "mounted": False,
                         "configured": device.caps(), "size_bytes": device.size_bytes}
                self.record["devices"].append(entry)
                fresh = not device.image.exists() or device.image.stat().st_size != device.size_bytes
                if fresh:
                    device.image.unlink(missing_ok=True)
                    with open(device.image, "wb") as image:
                        image.truncate(device.size_bytes)
                    # Inode tables and journal written now, not by a kernel thread during the measurements.
                    run_tool(["mkfs.ext4", "-q", "-F", "-m", "0", "-E", "lazy_itable_init=0,lazy_journal_init=0",
                          str(device.image)])
                entry["loop"] = run_tool(["losetup", "--find", "--show", "--direct-io=on", str(device.image)])
                entry["dev"] = _major_minor(entry["loop"])
                self._save()
                Path(device.path).mkdir(parents=True, exist_ok=True)
                run_tool(["mount", "-t", "ext4", entry["loop"], str(device.path)])
                entry["mounted"] = True
                self._save()
                lost = Path(device.path) / "lost+found"
                if fresh and lost.is_dir() and not any(lost.iterdir()):
                    lost.rmdir()  # the tier sees an empty directory, as a fresh pool directory is
                os.chmod(device.path, 0o777)  # LMCache and the runs write here as whoever runs them
            group = control.create(self.name)
            self.record["cgroup"] = str(group)
            self._save()
            for device, entry in zip(self.devices, self.record["devices"]):
                control.cap(group, entry["dev"], device)
            in_force = control.in_force(group)
            for entry in self.record["devices"]:
                entry["in_force"] = in_force.get(entry["dev"], {})
            self._save()
        except BaseException:
            teardown(self.state)
            raise
        return self.record

    def run(self, argv: list[str]) -> int:
        """Run `argv` inside the cgroup, with ENV_CAPS set; returns its exit status. Ctrl-C or SIGTERM reach it
        (it shares our process group, or receives ours forwarded) and we wait for it to finish its own cleanup."""
        group = Path(self.record["cgroup"])
        control = throttle()
        env = {**os.environ, ENV_CAPS: json.dumps(public(self.record))}
        child = subprocess.Popen(argv, env=env, preexec_fn=lambda: control.join(group))
        forwarded = signal.signal(signal.SIGTERM, lambda signum, frame: child.send_signal(signal.SIGTERM))
        try:
            while True:
                try:
                    status = child.wait()
                    return 128 - status if status < 0 else status  # killed by a signal: as a shell reports it
                except KeyboardInterrupt:
                    continue  # the child got the same Ctrl-C: let it unwind, then tear down
        finally:
            signal.signal(signal.SIGTERM, forwarded)

    @contextlib.contextmanager
    def session(self):
        """Up, with this process inside the cgroup (so that every process it starts is capped too) and ENV_CAPS
        set; on the way out, however it goes (an error, Ctrl-C, SIGTERM turned into one), this process leaves
        the cgroup and everything is torn down."""
        self.up()
        control = throttle()
        home = own_cgroup(control)
        try:
            control.join(Path(self.record["cgroup"]), os.getpid())
            os.environ[ENV_CAPS] = json.dumps(public(self.record))
            yield self.record
        finally:
            os.environ.pop(ENV_CAPS, None)
            with contextlib.suppress(OSError):
                control.join(home, os.getpid())
            teardown(self.state)


def own_cgroup(control: Throttle) -> Path:
    """The cgroup of this process in `control`'s hierarchy (where to return to), from /proc/self/cgroup."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if (control.version == 1 and "blkio" in controllers.split(",")) or (control.version == 2 and not controllers):
            return control.root / path.lstrip("/")
    return control.root


def public(record: dict) -> dict:
    """What the platform record and the pages keep of an emulation: per tier, the path as configured (relative to
    the project where it is), the device, and the caps configured and in force."""
    return {"cgroup_version": record.get("cgroup_version"), "cgroup": record.get("cgroup"),
            "tiers": {e["name"]: {"path": e.get("given_path", e["path"]), "device": e.get("loop"), "dev": e.get("dev"),
                                  "size_bytes": e["size_bytes"], "configured": e["configured"],
                                  "in_force": e.get("in_force", {})} for e in record.get("devices", [])},
            "not_emulated": NOT_EMULATED}


NOT_EMULATED = ["latency (no device-mapper delay target; a loop device answers in microseconds)",
                "buffered writes under cgroup v1 (written back by kernel threads outside the cgroup)"]


def teardown(state: str | os.PathLike, remove_images: bool = False) -> list[str]:
    """Free everything `state` records (cgroup, mounts, loop devices), in reverse order; idempotent. Returns what
    was freed, for the log."""
    state = Path(state)
    if not state.exists():
        return []
    record = json.loads(state.read_text())
    freed, errors = [], []
    control = throttle()
    if record.get("cgroup") and control is not None:
        try:
            control.remove(Path(record["cgroup"]))
            freed.append(f"cgroup {record['cgroup']}")
        except KvtierError as exc:
            errors.append(str(exc))
    for entry in reversed(record.get("devices", [])):
        if entry.get("mounted") or os.path.ismount(entry["path"]):
            for _attempt in range(20):
                done = subprocess.run(["umount", entry["path"]], capture_output=True, text=True)
                if done.returncode == 0 or not os.path.ismount(entry["path"]):
                    freed.append(f"mount {entry['path']}")
                    break
                time.sleep(0.25)  # a process that just exited may still hold a file open
            else:
                errors.append(f"umount {entry['path']}: {done.stderr.strip()}")
                continue
        if entry.get("loop"):
            done = subprocess.run(["losetup", "-d", entry["loop"]], capture_output=True, text=True)
            if done.returncode == 0:
                freed.append(f"loop {entry['loop']}")
            elif _attached(entry["loop"], entry["image"]):
                errors.append(f"losetup -d {entry['loop']}: {done.stderr.strip()}")
        if remove_images:
            Path(entry["image"]).unlink(missing_ok=True)
    if errors:
        raise KvtierError(f"emulated tiers ({state}): left behind: {'; '.join(errors)}")
    state.unlink(missing_ok=True)
    return freed


def _attached(loop: str, image: str) -> bool:
    done = subprocess.run(["losetup", "--noheadings", "--output", "BACK-FILE", loop], capture_output=True,
                          text=True)
    return done.returncode == 0 and done.stdout.strip() == image


def in_command() -> dict | None:
    """The emulation the current command runs inside (set by `Emulation.run`), or None."""
    text = os.environ.get(ENV_CAPS)
    return json.loads(text) if text else None


def devices_from_config(emulation: dict, paths: dict[str, str]) -> list[Device]:
    """The Device of every tier `emulation.tiers` names, on its path from `paths` (tier -> directory)."""
    unknown = set(emulation.get("tiers", {})) - set(paths)
    if unknown:
        raise KvtierError(f"emulation.tiers: {sorted(unknown)} are not tier paths ({sorted(paths)})")
    return [Device.from_config(name, paths[name], entry) for name, entry in emulation.get("tiers", {}).items()]


def devices_with_paths(tiers: object, refusal: str) -> list[Device]:
    """The Devices of a JSON value {tier: {path, size, read, write, read_iops?, write_iops?}} (`kvtier emulate
    --tiers`, ENV_PLAN's `tiers`); `refusal` (saying where it came from and what was expected) when it is not
    one."""
    if not isinstance(tiers, dict) or not all(isinstance(e, dict) and "path" in e for e in tiers.values()):
        raise KvtierError(refusal)
    return [Device.from_config(name, entry["path"], {k: v for k, v in entry.items() if k != "path"})
            for name, entry in tiers.items()]


def plan(emulation: dict, paths: dict[str, str], source: str = "config") -> tuple[dict | None, str]:
    """What the workflow hands its jobs (ENV_PLAN's value) for the config's `emulation` section, or None, and a
    sentence saying which and why. `enabled: auto` emulates where this machine can; `true` refuses, naming the
    reason, where it cannot; `false` never emulates. Every cap and size is checked here, at load."""
    devices = devices_from_config(emulation, paths)
    enabled = emulation.get("enabled", False)
    if enabled is False:
        return None, "not emulated (emulation.enabled: false): the tier paths are used as they are"
    if not devices:
        raise KvtierError(f"{source}: emulation.enabled is {enabled!r} but emulation.tiers names no tier")
    why = unavailable()
    if why:
        if enabled is True:
            raise KvtierError(f"{source}: emulation.enabled: true, but tiers cannot be emulated here: {why} "
                              "(set emulation.enabled: auto to measure the paths as they are)")
        return None, f"not emulated here: {why}"
    return ({"state": emulation.get("state", DEFAULT_STATE),
             "tiers": {d.name: {"path": d.path, **emulation["tiers"][d.name]} for d in devices}},
            f"emulated: {', '.join(f'{d.name} (read {d.read_bps / 1e6:g} MB/s)' for d in devices)}")


def from_plan(text: str, name: str = "tiers") -> Emulation:
    """The Emulation an ENV_PLAN value describes (a JSON object {state, tiers: {tier: {path, size, read, ...}}})."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise KvtierError(f"{ENV_PLAN}: not JSON ({exc})") from None
    tiers = value.get("tiers") if isinstance(value, dict) else None
    devices = devices_with_paths(tiers, f"{ENV_PLAN}: a JSON object {{state, tiers: {{tier: {{path, size, read, "
                                        "write}}}")
    return Emulation(devices, value.get("state") or DEFAULT_STATE, name)


@contextlib.contextmanager
def around_command(what: str):
    """The emulated tiers around one measuring command, when the workflow asked for them (ENV_PLAN set), else
    nothing. The caller holds the node's measurement lock, so an emulation its state file still records was left
    by a killed command: it is freed first, and the log says so."""
    text = os.environ.get(ENV_PLAN)
    if not text or os.environ.get(ENV_CAPS):  # not asked for, or already inside one (`kvtier emulate run`)
        yield None
        return
    emulation = from_plan(text)
    _free_what_was_left(emulation, what)
    with emulation.session() as record:
        yield record


@contextlib.contextmanager
def outside(what: str):
    """A measuring command that reads the tier paths as they are even where the workflow emulates them (R1's):
    an emulation a killed command left is freed first, so that nothing is mounted on the paths."""
    text = os.environ.get(ENV_PLAN)
    if text and not os.environ.get(ENV_CAPS):
        _free_what_was_left(from_plan(text), what)
    yield


def _free_what_was_left(emulation: Emulation, what: str) -> None:
    """The caller holds the node's measurement lock, so an emulation the state file still records was left by a
    killed command: free it, and say so in the log."""
    left = teardown(emulation.state)
    if left:
        print(f"kvtier: {what}: freed an emulation a killed command left: {', '.join(left)}", file=sys.stderr,
              flush=True)


def set_read_cap(tier: str, read_bps: int) -> dict:
    """Rewrite the read cap of one emulated tier of the emulation this command runs inside, effective for the
    next I/O (a bandwidth sweep: no server restarts); returns the tier's caps in force afterwards."""
    inside = in_command()
    if not inside or tier not in inside.get("tiers", {}):
        raise KvtierError(f"tier {tier!r} is not emulated in this command (emulation: "
                          f"{', '.join(inside['tiers']) if inside else 'none'})")
    if not isinstance(read_bps, int) or read_bps <= 0:
        raise KvtierError(f"read cap of {tier}: {read_bps!r} must be a positive number of bytes/s")
    entry, control = inside["tiers"][tier], throttle()
    group = Path(inside["cgroup"])
    configured = entry["configured"]
    device = Device(tier, entry["path"], entry["size_bytes"], read_bps, configured["write_bps"],
                    configured.get("read_iops"), configured.get("write_iops"))
    control.cap(group, entry["dev"], device)
    return control.in_force(group).get(entry["dev"], {})
