"""Unpacks .deb files into a root folder without dpkg (for scripts/setup.sh
--offline on hosts that are not Debian). Usage:
  python3 scripts/extract_debs.py DEBS_DIR ROOT_DIR
A .deb is an ar archive whose data.tar.{xz,gz,zst} holds the files.
"""
import io
import os
import pathlib
import sys
import tarfile


def members(ar_bytes: bytes):
    if not ar_bytes.startswith(b"!<arch>\n"):
        raise ValueError("not an ar archive")
    pos = 8
    while pos + 60 <= len(ar_bytes):
        header = ar_bytes[pos:pos + 60]
        name = header[:16].decode().strip().rstrip("/")
        size = int(header[48:58].decode().strip())
        yield name, ar_bytes[pos + 60:pos + 60 + size]
        pos += 60 + size + (size & 1)


def main() -> None:
    debs, root = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    root.mkdir(parents=True, exist_ok=True)
    for deb in sorted(debs.glob("*.deb")):
        for name, data in members(deb.read_bytes()):
            if name.startswith("data.tar"):
                if name.endswith(".zst"):
                    raise SystemExit(f"{deb}: zstd data is not supported")
                with tarfile.open(fileobj=io.BytesIO(data)) as tar:
                    # Extraction filters exist from Python 3.11.4 on.
                    if hasattr(tarfile, "tar_filter"):
                        tar.extractall(root, filter="tar")
                    else:
                        tar.extractall(root)
        print(f"unpacked {deb.name}")
    # A package's absolute links (zlib1g-dev: libz.so -> /lib/.../libz.so.1.2.13)
    # name the host's files; point those whose target was unpacked here
    # into the root, so the host's own version of the library is not needed.
    for link in root.rglob("*"):
        if link.is_symlink():
            target = pathlib.Path(link.readlink())
            inside = root / target.relative_to("/") if target.is_absolute() else None
            if inside is not None and inside.exists():
                link.unlink()
                link.symlink_to(os.path.relpath(inside, link.parent))


if __name__ == "__main__":
    main()
