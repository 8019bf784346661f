"""sandbox.files with the sync API: read (text, bytes, stream), write,
write_files, list with depth, exists, get_info, remove, rename, make_dir,
watch_dir, signed URLs, and the SDK's exceptions."""

import hashlib
import re
import time

import pytest
from e2b import (
    FileNotFoundException,
    FilesystemEventType,
    FileType,
    InvalidArgumentException,
    NotFoundException,
    SandboxException,
)

from conftest import HOME, http_client, unique, wait_for


@pytest.fixture(scope="module")
def base(sbx):
    d = f"{HOME}/{unique('files')}"
    assert sbx.files.make_dir(d) is True
    return d


def test_write_and_read_text(sbx, base):
    path = f"{base}/hello.txt"
    info = sbx.files.write(path, "Hello, wörld!\n")
    assert (info.path, info.name, info.type) == (path, "hello.txt", FileType.FILE)
    assert sbx.files.read(path) == "Hello, wörld!\n"
    assert sbx.commands.run(f"cat '{path}'").stdout == "Hello, wörld!\n"


def test_write_and_read_bytes_and_stream(sbx, base):
    path = f"{base}/bytes.bin"
    data = bytes((i * 7) % 256 for i in range(256 * 40))
    sbx.files.write(path, data)
    got = sbx.files.read(path, format="bytes")
    assert isinstance(got, (bytes, bytearray)) and bytes(got) == data
    assert sbx.commands.run(f"sha256sum < '{path}'").stdout.split()[0] == hashlib.sha256(data).hexdigest()

    big = f"{base}/big.txt"
    text = "0123456789" * 100_000
    sbx.files.write(big, text)
    streamed = b"".join(sbx.files.read(big, format="stream"))
    assert streamed == text.encode()


def test_empty_file_and_gzip(sbx, base):
    sbx.files.write(f"{base}/empty", "")
    assert sbx.files.read(f"{base}/empty") == ""
    assert sbx.files.get_info(f"{base}/empty").size == 0
    text = "compressible " * 5000
    sbx.files.write(f"{base}/gz.txt", text, gzip=True)
    assert sbx.files.read(f"{base}/gz.txt", gzip=True) == text
    sbx.files.write(f"{base}/chunks.txt", iter([b"streamed ", b"upload"]))
    assert sbx.files.read(f"{base}/chunks.txt") == "streamed upload"


def test_write_overwrites_and_makes_parents(sbx, base):
    path = f"{base}/deep/er/file.txt"
    sbx.files.write(path, "a much longer first version")
    sbx.files.write(path, "short")
    assert sbx.files.read(path) == "short"
    d = sbx.files.get_info(f"{base}/deep/er")
    assert (d.type, d.owner) == (FileType.DIR, "user")


def test_write_files(sbx, base):
    files = [
        {"path": f"{base}/multi/a.txt", "data": "A"},
        {"path": f"{base}/multi/sub/b.txt", "data": "BB"},
        {"path": f"{base}/multi/c.bin", "data": bytes([0, 1, 2, 255])},
    ]
    infos = sbx.files.write_files(files)
    assert sorted(i.path for i in infos) == sorted(f["path"] for f in files)
    assert all(i.type == FileType.FILE for i in infos)
    assert sbx.files.read(f"{base}/multi/a.txt") == "A"
    assert sbx.files.read(f"{base}/multi/sub/b.txt") == "BB"
    assert bytes(sbx.files.read(f"{base}/multi/c.bin", format="bytes")) == bytes([0, 1, 2, 255])


def test_list_with_depth(sbx, base):
    root = f"{base}/tree"
    sbx.files.write(f"{root}/d1/d2/deep.txt", "x")
    sbx.files.write(f"{root}/top.txt", "top")
    one = {e.name: e for e in sbx.files.list(root)}
    assert sorted(one) == ["d1", "top.txt"]
    assert (one["d1"].type, one["d1"].path) == (FileType.DIR, f"{root}/d1")
    assert (one["top.txt"].type, one["top.txt"].size, one["top.txt"].path) == (FileType.FILE, 3, f"{root}/top.txt")
    assert sorted(e.path for e in sbx.files.list(root, depth=2)) == [f"{root}/d1", f"{root}/d1/d2", f"{root}/top.txt"]
    assert sorted(e.path for e in sbx.files.list(root, depth=3)) == [
        f"{root}/d1",
        f"{root}/d1/d2",
        f"{root}/d1/d2/deep.txt",
        f"{root}/top.txt",
    ]
    with pytest.raises(NotFoundException):
        sbx.files.list(f"{base}/no-such-dir")
    with pytest.raises(InvalidArgumentException):
        sbx.files.list(f"{root}/top.txt")


def test_exists_and_get_info(sbx, base):
    path = f"{base}/info.txt"
    sbx.files.write(path, "12345")
    assert sbx.files.exists(path) is True
    assert sbx.files.exists(base) is True
    assert sbx.files.exists(f"{base}/does-not-exist") is False

    sbx.commands.run(f"chmod 640 '{path}'")
    info = sbx.files.get_info(path)
    assert (info.name, info.path, info.type, info.size) == ("info.txt", path, FileType.FILE, 5)
    assert (info.owner, info.group) == ("user", "user")
    assert (info.permissions, info.mode) == ("-rw-r-----", 0o640)
    assert abs(info.modified_time.timestamp() - time.time()) < 60

    sbx.commands.run(f"ln -s '{path}' '{base}/link'")
    assert sbx.files.get_info(f"{base}/link").symlink_target == path
    with pytest.raises(NotFoundException):
        sbx.files.get_info(f"{base}/missing")


def test_make_dir_rename_remove(sbx, base):
    d = f"{base}/made/with/parents"
    assert sbx.files.make_dir(d) is True
    assert sbx.files.make_dir(d) is False
    assert sbx.files.get_info(f"{base}/made").owner == "user"

    sbx.files.write(f"{base}/old.txt", "moving")
    info = sbx.files.rename(f"{base}/old.txt", f"{base}/renamed/new.txt")
    assert (info.path, info.name, info.type) == (f"{base}/renamed/new.txt", "new.txt", FileType.FILE)
    assert sbx.files.exists(f"{base}/old.txt") is False
    assert sbx.files.read(f"{base}/renamed/new.txt") == "moving"
    with pytest.raises(NotFoundException):
        sbx.files.rename(f"{base}/old.txt", f"{base}/x.txt")

    sbx.files.write(f"{base}/rm/a/b.txt", "b")
    sbx.files.write(f"{base}/rm/c.txt", "c")
    sbx.files.remove(f"{base}/rm/c.txt")
    assert sbx.files.exists(f"{base}/rm/c.txt") is False
    sbx.files.remove(f"{base}/rm")
    assert sbx.files.exists(f"{base}/rm") is False


def test_missing_file_and_directory_errors(sbx, base):
    with pytest.raises(FileNotFoundException):
        sbx.files.read(f"{base}/nope.txt")
    with pytest.raises(InvalidArgumentException):
        sbx.files.read(base)
    sbx.files.make_dir(f"{base}/adir")
    with pytest.raises(SandboxException):
        sbx.files.write(f"{base}/adir", "x")


def test_relative_paths_and_root(sbx):
    name = unique("rel") + ".txt"
    assert sbx.files.write(name, "relative").path == f"{HOME}/{name}"
    assert sbx.files.read(f"{HOME}/{name}") == "relative"
    path = f"/root/{unique('root')}.txt"
    sbx.files.write(path, "secret", user="root")
    assert sbx.files.get_info(path, user="root").owner == "root"
    assert sbx.files.read(path, user="root") == "secret"
    # Relative paths resolve against the user's home.
    assert sbx.files.get_info(path.removeprefix("/root/"), user="root").path == path


def test_signed_urls(sbx, base):
    path = f"{base}/{unique('signed')}.txt"
    up = sbx.upload_url(path, use_signature_expiration=60)
    assert "signature=v1_" in up
    with http_client() as c:
        r = c.post(up, files={"file": (path, b"signed content")})
        assert r.status_code == 200, r.text
        assert sbx.files.read(path) == "signed content"
        down = sbx.download_url(path, use_signature_expiration=60)
        assert c.get(down).text == "signed content"
        bad = c.get(re.sub(r"signature=v1_[^&]+", "signature=v1_AAAA", down))
        assert (bad.status_code, bad.json()) == (401, {"code": 401, "message": "invalid signature"})


def has(events, type_, name):
    return any(e.type == type_ and e.name == name for e in events)


def test_watch_dir_recursive(sbx):
    d = f"{HOME}/{unique('watch')}"
    sbx.files.make_dir(d)
    w = sbx.files.watch_dir(d, recursive=True)
    events = []

    def saw(type_, name):
        def poll():
            events.extend(w.get_new_events())
            return has(events, type_, name)

        wait_for(poll, 10, lambda: f"{type_.value} {name} (got {[(e.type.value, e.name) for e in events]})")

    try:
        sbx.files.write(f"{d}/a.txt", "hello")
        saw(FilesystemEventType.CREATE, "a.txt")
        sbx.commands.run(f"echo more >> '{d}/a.txt'")
        saw(FilesystemEventType.WRITE, "a.txt")
        sbx.files.make_dir(f"{d}/sub")
        saw(FilesystemEventType.CREATE, "sub")
        time.sleep(0.3)  # the watcher adds the new subdirectory
        sbx.commands.run(f"echo nested > '{d}/sub/b.txt'")
        saw(FilesystemEventType.CREATE, "sub/b.txt")
        sbx.files.remove(f"{d}/a.txt")
        saw(FilesystemEventType.REMOVE, "a.txt")
        sbx.files.rename(f"{d}/sub/b.txt", f"{d}/moved.txt")
        saw(FilesystemEventType.RENAME, "sub/b.txt")
        saw(FilesystemEventType.CREATE, "moved.txt")
        sbx.commands.run(f"chmod 600 '{d}/moved.txt'")
        saw(FilesystemEventType.CHMOD, "moved.txt")
    finally:
        w.stop()


def test_watch_dir_flat_and_missing(sbx):
    d = f"{HOME}/{unique('watchflat')}"
    sbx.files.make_dir(f"{d}/sub")
    w = sbx.files.watch_dir(d)
    events = []
    try:
        sbx.commands.run(f"echo x > '{d}/sub/inner.txt'; echo y > '{d}/top.txt'")

        def poll():
            events.extend(w.get_new_events())
            return has(events, FilesystemEventType.CREATE, "top.txt")

        wait_for(poll, 10, "create top.txt")
        time.sleep(0.3)
        events.extend(w.get_new_events())
        assert not any("inner.txt" in e.name for e in events), events
    finally:
        w.stop()
    with pytest.raises(NotFoundException):
        sbx.files.watch_dir(f"{HOME}/{unique('nowatch')}")
