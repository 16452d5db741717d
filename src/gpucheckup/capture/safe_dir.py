"""A run directory only its owner controls: the `--out` folder checked, the run directory made with
mode 0700, and every file opened relative to the directory's descriptor with O_NOFOLLOW.

The threat (docs/reliability.md, "Threat model"): on a shared host, another local user who owns
or can write the folder that holds a run directory could swap the fresh run directory for a
symbolic link, and the launcher and the agent would write through it (into the victim's home, or
into the attacker's folder, from which the victim's check-up would be computed). Hence:

- `check_out(out)`: every folder from `/` down to `out` (symbolic links resolved) belongs to us
  or to root, and none is writable by group or others unless it is sticky (then only its entries'
  owners may rename them, and the entry on our path must be ours or root's); a symbolic link on
  the way must belong to us or to root. Otherwise UnsafeFolder, whose text is the one-line refusal.
- `create(out, name)`: `mkdir` of a new folder (mode 0700, failing if the name exists) relative to
  `out`'s descriptor, then opened with O_NOFOLLOW | O_DIRECTORY and checked (ours, 0700).
- `RunDirectory`: writes relative to the held descriptor; each path component is opened with
  O_NOFOLLOW, so no link inside the run directory is followed either. Atomic writes are a
  temporary file (O_EXCL) renamed into place, both relative to the descriptor.
- `RunDirectory.existing(path, expect_id)`: the agent inside the job opens the run directory the
  launcher made and checks it is that very folder (device and inode from GPUCHECKUP_RUN_DIR_ID).

Standard library only: the agent imports this module inside the user's job.
"""

from __future__ import annotations

import errno
import json
import os
import stat

RESERVE = ".reserve"  # space held for the manifest during the run (RunDirectory.reserve)
DIR_MODE = 0o700
FILE_MODE = 0o644  # inside a 0700 folder; the umask applies
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


def cause(e: BaseException) -> str:
    """An exception as its real cause: `ENOSPC (No space left on device): <file>` for an OSError."""
    if isinstance(e, OSError) and not isinstance(e, UnsafeFolder) and e.errno:
        name = errno.errorcode.get(e.errno, f"errno {e.errno}")
        where = f": {e.filename}" if e.filename else ""
        return f"{name} ({e.strerror or os.strerror(e.errno)}){where}"
    return f"{type(e).__name__}: {e}"


class UnsafeFolder(OSError):
    """A folder another user could swap or write into; its text is the one-line refusal."""


def _who(uid: int) -> str:
    """A uid with its user name where there is one."""
    try:
        import pwd

        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def _trusted(uid: int) -> bool:
    return uid in (os.geteuid(), 0)


def check_out(out) -> None:
    """Refuse (UnsafeFolder) an `--out` folder that another user could swap or write into (module docstring).
    Parts that do not exist yet are made by us, so only existing folders are checked."""
    path = os.path.abspath(os.fspath(out))
    cur = "/"
    for comp in [c for c in path.split("/") if c]:
        nxt = os.path.join(cur, comp)
        try:
            st = os.lstat(nxt)
        except FileNotFoundError:
            break
        if stat.S_ISLNK(st.st_mode):
            if not _trusted(st.st_uid):
                raise UnsafeFolder(f"{nxt} is a link that belongs to {_who(st.st_uid)}: another user chooses "
                                   "where the run directory goes; use an --out folder of your own")
            nxt = os.path.realpath(nxt)
        cur = nxt
    chain, d = [], os.path.realpath(path)
    while True:
        chain.append(d)
        if d == "/":
            break
        d = os.path.dirname(d)
    chain.reverse()  # from "/" down to out
    for i, d in enumerate(chain):
        try:
            st = os.stat(d)
        except FileNotFoundError:
            break
        _check_folder(d, st, out=i == len(chain) - 1)
        if st.st_mode & 0o022 and st.st_mode & stat.S_ISVTX and i + 1 < len(chain):
            try:  # a sticky folder open to others: the entry on our path must be ours (or root's)
                sub = os.lstat(chain[i + 1])
            except FileNotFoundError:
                break
            if not _trusted(sub.st_uid):
                raise UnsafeFolder(f"{chain[i + 1]} belongs to {_who(sub.st_uid)}, in the shared folder {d}: that "
                                   "user could swap the run directory for a link; use an --out folder of your own")


def _check_folder(d: str, st: os.stat_result, out: bool) -> None:
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeFolder(f"{d} is not a folder")
    if not _trusted(st.st_uid):
        raise UnsafeFolder(f"{d} belongs to {_who(st.st_uid)}: that user could swap the run directory for a "
                           "link; use an --out folder of your own")
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        who = "group and others" if st.st_mode & 0o022 == 0o022 else ("group" if st.st_mode & 0o020 else "others")
        raise UnsafeFolder(f"{d} is writable by {who} (mode {oct(st.st_mode & 0o7777)}) and not sticky: another "
                           f"user could swap the run directory for a link; chmod go-w {d}, or use another --out")


class NoParent(OSError):
    """The folder above `--out` does not exist: only `out` itself is made, never the folders above it (a typo in
    them must not make folders); its text is the one-line reason."""


def create(out, name: str, tries: int = 999) -> "RunDirectory":
    """A new run directory `<out>/<name>` (`-2`, `-3`, ... when taken), mode 0700, after check_out(out).
    `out` itself is made (0700) when missing, the folders above it never (NoParent). UnsafeFolder or OSError."""
    out = os.path.abspath(os.fspath(out))
    check_out(out)
    try:
        os.mkdir(out, DIR_MODE)
    except FileExistsError:
        pass
    except FileNotFoundError:
        raise NoParent(errno.ENOENT, f"its folder {os.path.dirname(out)} does not exist") from None
    check_out(out)  # what mkdir met (a folder made meanwhile by someone else)
    parent = os.open(out, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
    try:
        _check_folder(out, os.fstat(parent), out=True)  # the folder we opened is the one checked
        for i in range(1, tries + 1):
            leaf = name if i == 1 else f"{name}-{i}"
            try:
                os.mkdir(leaf, DIR_MODE, dir_fd=parent)
            except FileExistsError:
                continue
            fd = os.open(leaf, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=parent)
            rd = RunDirectory(os.path.join(out, leaf), fd)
            rd.check_private()
            return rd
    finally:
        os.close(parent)
    raise OSError(errno.EEXIST, f"no free run directory name {name}-N in {out}")


class RunDirectory:
    """An open run directory: files read and written relative to its descriptor, no link followed."""

    def __init__(self, path: str, fd: int):
        self.path = path
        self.fd = fd

    @classmethod
    def existing(cls, path: str, expect_id: str | None = None, private: bool = True) -> "RunDirectory":
        """Open an existing run directory; OSError when it is a link, (`private`) not ours or open to others,
        or not the folder `expect_id` (`dev:ino`) names."""
        fd = os.open(path, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC)
        rd = cls(os.path.abspath(path), fd)
        try:
            if private:
                rd.check_private()
            if expect_id and rd.id != expect_id:
                raise UnsafeFolder(f"{path} is not the run directory the launcher made (it was replaced)")
        except BaseException:
            rd.close()
            raise
        return rd

    @property
    def id(self) -> str:
        """`device:inode` of the folder held open."""
        st = os.fstat(self.fd)
        return f"{st.st_dev}:{st.st_ino}"

    def check_private(self) -> None:
        st = os.fstat(self.fd)
        if st.st_uid != os.geteuid():
            raise UnsafeFolder(f"{self.path} belongs to {_who(st.st_uid)}, not to us")
        if st.st_mode & 0o077:
            raise UnsafeFolder(f"{self.path} is open to other users (mode {oct(st.st_mode & 0o777)})")

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def replaced(self) -> str | None:
        """What stands at the run directory's path now when it is no longer the folder held open (else None)."""
        try:
            st = os.lstat(self.path)
        except OSError as e:
            return f"nothing ({e.strerror})"
        if stat.S_ISLNK(st.st_mode):
            return f"a link to {os.readlink(self.path)}"
        if f"{st.st_dev}:{st.st_ino}" != self.id:
            return "another folder"
        return None

    # ---- paths inside ---------------------------------------------------------------------------
    def _dir_of(self, name: str, make: bool = False) -> tuple[int, str]:
        """(descriptor of the folder holding `name`, the last component); the caller closes the descriptor
        when it is not self.fd. Each folder is opened with O_NOFOLLOW."""
        parts = [p for p in name.split("/") if p and p != "."]
        if not parts or ".." in parts:
            raise ValueError(f"not a name inside the run directory: {name!r}")
        fd = self.fd
        try:
            for p in parts[:-1]:
                if make:
                    try:
                        os.mkdir(p, DIR_MODE, dir_fd=fd)
                    except FileExistsError:
                        pass
                nfd = os.open(p, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=fd)
                if fd != self.fd:
                    os.close(fd)
                fd = nfd
        except BaseException:
            if fd != self.fd:
                os.close(fd)
            raise
        return fd, parts[-1]

    def _at(self, name: str, fn, make: bool = False):
        fd, leaf = self._dir_of(name, make)
        try:
            return fn(fd, leaf)
        finally:
            if fd != self.fd:
                os.close(fd)

    def makedirs(self, name: str) -> None:
        """Make a folder (and its parents) inside the run directory."""
        self._at(name + "/x", lambda fd, leaf: None, make=True)

    def open(self, name: str, flags: int, mode: int = FILE_MODE) -> int:
        """os.open of a file inside the run directory, never through a link."""
        return self._at(name, lambda fd, leaf: os.open(leaf, flags | _NOFOLLOW | _CLOEXEC, mode, dir_fd=fd),
                        make=bool(flags & os.O_CREAT))

    def append(self, name: str, data: bytes) -> None:
        """One write on an O_APPEND descriptor (a log line: lines of several processes never interleave)."""
        fd = self.open(name, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)

    def write_atomic(self, name: str, data: bytes) -> None:
        """Write a file so that readers see either the old or the complete new content."""
        def write(fd, leaf):
            for i in range(100):
                tmp = f".{leaf}.{os.getpid()}.{i}.tmp"
                try:
                    f = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, FILE_MODE,
                                dir_fd=fd)
                    break
                except FileExistsError:
                    continue
            else:
                raise OSError(errno.EEXIST, f"no free temporary name for {name}")
            try:
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(f, view):]
                finally:
                    os.close(f)
                os.replace(tmp, leaf, src_dir_fd=fd, dst_dir_fd=fd)
            except BaseException:
                try:
                    os.unlink(tmp, dir_fd=fd)
                except OSError:
                    pass
                raise

        self._at(name, write, make=True)

    def write_json(self, name: str, obj) -> None:
        """Write an object as indented JSON, atomically."""
        self.write_atomic(name, (json.dumps(obj, indent=2, default=str) + "\n").encode())

    def replace(self, src: str, dst: str) -> None:
        """Rename a file inside one folder of the run directory (atomic publish)."""
        sfd, sleaf = self._dir_of(src)
        try:
            dfd, dleaf = self._dir_of(dst)
            try:
                os.replace(sleaf, dleaf, src_dir_fd=sfd, dst_dir_fd=dfd)
            finally:
                if dfd != self.fd:
                    os.close(dfd)
        finally:
            if sfd != self.fd:
                os.close(sfd)

    def unlink(self, name: str) -> None:
        self._at(name, lambda fd, leaf: os.unlink(leaf, dir_fd=fd))

    def lstat(self, name: str) -> os.stat_result:
        return self._at(name, lambda fd, leaf: os.stat(leaf, dir_fd=fd, follow_symlinks=False))

    def exists(self, name: str) -> bool:
        try:
            self.lstat(name)
            return True
        except OSError:
            return False

    def read_text(self, name: str) -> str:
        fd = self.open(name, os.O_RDONLY)
        with os.fdopen(fd, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def files(self) -> list[tuple[str, int]]:
        """(relative path, bytes) of every plain file inside, links not followed, sorted."""
        out = []
        for top, _dirs, names, dfd in os.fwalk(".", dir_fd=self.fd):
            for n in names:
                st = os.stat(n, dir_fd=dfd, follow_symlinks=False)
                if stat.S_ISREG(st.st_mode):
                    rel = os.path.normpath(os.path.join(top, n))
                    out.append((rel, st.st_size))
        return sorted(out)

    def reserve(self, nbytes: int) -> None:
        """Hold `nbytes` of the file system in RESERVE (allocated, not sparse): freed by release() so that the
        manifest can still be written when the job has filled the disk."""
        fd = self.open(RESERVE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            try:
                os.posix_fallocate(fd, 0, nbytes)
            except (AttributeError, OSError):
                os.write(fd, b"\0" * nbytes)
        finally:
            os.close(fd)

    def release(self) -> None:
        """Free the reserved space."""
        try:
            self.unlink(RESERVE)
        except FileNotFoundError:
            pass

    def artefacts(self) -> list[dict]:
        """Every file inside (the manifest excepted): path, bytes, and what it holds (layout.ARTEFACT_WHAT)."""
        from gpucheckup import layout

        return [{"path": rel, "bytes": size,
                 "what": next((w for prefix, w in layout.ARTEFACT_WHAT if rel.startswith(prefix)),
                              "file left by the job or agent")}
                for rel, size in self.files() if rel != layout.MANIFEST]

    def remove_tree(self, name: str) -> None:
        """Remove a folder inside the run directory and everything in it (links are removed, not followed)."""
        try:
            for top, dirs, names, dfd in os.fwalk(name, dir_fd=self.fd, topdown=False):
                for n in names:
                    os.unlink(n, dir_fd=dfd)
                for n in dirs:
                    try:
                        os.rmdir(n, dir_fd=dfd)
                    except NotADirectoryError:
                        os.unlink(n, dir_fd=dfd)
            os.rmdir(name, dir_fd=self.fd)
        except FileNotFoundError:
            pass
