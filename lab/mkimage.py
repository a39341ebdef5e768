#!/usr/bin/env python3
"""Pack a one-layer OCI image tarball (an OCI image layout in a tar) that
`ctr images import` accepts. Python stdlib only; no registry, no docker.

The output is deterministic (fixed mtimes, owners, order), so the same
inputs always give the same digests and a re-import is a no-op.

Usage:
  mkimage.py --ref localhost/nri-trace/pause:lab --out pause.tar \
      --file /path/to/pause:/pause:0755 --entrypoint /pause
  mkimage.py --ref localhost/nri-trace/busybox:lab --out busybox.tar \
      --file /bin/busybox:/bin/busybox:0755 --symlink /bin/sh:busybox --cmd sh
"""
import argparse
import gzip
import hashlib
import io
import json
import os
import platform
import sys
import tarfile

# Directories every rootfs gets: runc and containerd mount or create files
# in them (proc, sys, dev, /etc/hosts, /etc/resolv.conf, /dev/shm, ...).
BASE_DIRS = ["bin", "dev", "etc", "proc", "run", "sys", "tmp", "var"]
EPOCH = 0  # fixed mtime: reproducible digests


def go_arch():
    m = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm"}.get(m, m)


def tar_info(name, kind, mode, size=0, link=""):
    ti = tarfile.TarInfo(name)
    ti.type = kind
    ti.mode = mode
    ti.size = size
    ti.linkname = link
    ti.mtime = EPOCH
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = "root"
    return ti


def build_layer(files, symlinks, dirs):
    """Return the uncompressed layer tar as bytes."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        wanted = set(BASE_DIRS) | set(d.strip("/") for d in dirs)
        for _, dest, _ in files:
            wanted.add(os.path.dirname(dest.strip("/")))
        for dest, _ in symlinks:
            wanted.add(os.path.dirname(dest.strip("/")))
        # Add parents too, sorted so parents come first.
        all_dirs = set()
        for d in wanted:
            while d:
                all_dirs.add(d)
                d = os.path.dirname(d)
        for d in sorted(all_dirs):
            mode = 0o1777 if d == "tmp" else 0o755
            tar.addfile(tar_info(d + "/", tarfile.DIRTYPE, mode))
        for src, dest, mode in sorted(files, key=lambda f: f[1]):
            with open(src, "rb") as f:
                data = f.read()
            tar.addfile(tar_info(dest.strip("/"), tarfile.REGTYPE, mode, len(data)),
                        io.BytesIO(data))
        for dest, target in sorted(symlinks):
            tar.addfile(tar_info(dest.strip("/"), tarfile.SYMTYPE, 0o777, link=target))
    return buf.getvalue()


def sha256(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ref", required=True, help="full image reference (ref.name annotation)")
    ap.add_argument("--out", required=True, help="output .tar")
    ap.add_argument("--file", action="append", default=[], help="SRC:DEST[:MODE(octal)]")
    ap.add_argument("--symlink", action="append", default=[], help="DEST:TARGET")
    ap.add_argument("--dir", action="append", default=[], help="extra empty directory")
    ap.add_argument("--entrypoint", action="append", default=[], help="entrypoint argv (repeat)")
    ap.add_argument("--cmd", action="append", default=[], help="cmd argv (repeat)")
    a = ap.parse_args()

    files = []
    for spec in a.file:
        parts = spec.split(":")
        if len(parts) not in (2, 3):
            ap.error("--file wants SRC:DEST[:MODE], got %r" % spec)
        mode = int(parts[2], 8) if len(parts) == 3 else 0o755
        files.append((parts[0], parts[1], mode))
    symlinks = []
    for spec in a.symlink:
        dest, sep, target = spec.partition(":")
        if not sep:
            ap.error("--symlink wants DEST:TARGET, got %r" % spec)
        symlinks.append((dest, target))

    layer = build_layer(files, symlinks, a.dir)
    gz = io.BytesIO()
    # mtime=0 and no file name in the gzip header: reproducible.
    with gzip.GzipFile(filename="", mode="wb", fileobj=gz, mtime=0) as g:
        g.write(layer)
    layer_gz = gz.getvalue()

    img_config = {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
                  "WorkingDir": "/"}
    if a.entrypoint:
        img_config["Entrypoint"] = a.entrypoint
    if a.cmd:
        img_config["Cmd"] = a.cmd
    config = {
        "created": "1970-01-01T00:00:00Z",
        "architecture": go_arch(),
        "os": "linux",
        "config": img_config,
        "rootfs": {"type": "layers", "diff_ids": [sha256(layer)]},
        "history": [{"created": "1970-01-01T00:00:00Z",
                     "created_by": "nri-trace lab/mkimage.py"}],
    }
    config_b = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": sha256(config_b), "size": len(config_b)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": sha256(layer_gz), "size": len(layer_gz)}],
    }
    manifest_b = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": sha256(manifest_b), "size": len(manifest_b),
            "platform": {"architecture": go_arch(), "os": "linux"},
            "annotations": {"org.opencontainers.image.ref.name": a.ref},
        }],
    }
    index_b = json.dumps(index, sort_keys=True, separators=(",", ":")).encode()

    tmp = a.out + ".tmp"
    with tarfile.open(tmp, mode="w", format=tarfile.PAX_FORMAT) as out:
        out.addfile(tar_info("blobs/", tarfile.DIRTYPE, 0o755))
        out.addfile(tar_info("blobs/sha256/", tarfile.DIRTYPE, 0o755))
        for blob in (layer_gz, config_b, manifest_b):
            name = "blobs/sha256/" + sha256(blob)[len("sha256:"):]
            out.addfile(tar_info(name, tarfile.REGTYPE, 0o644, len(blob)), io.BytesIO(blob))
        layout = b'{"imageLayoutVersion":"1.0.0"}'
        out.addfile(tar_info("oci-layout", tarfile.REGTYPE, 0o644, len(layout)),
                    io.BytesIO(layout))
        out.addfile(tar_info("index.json", tarfile.REGTYPE, 0o644, len(index_b)),
                    io.BytesIO(index_b))
    os.replace(tmp, a.out)
    print("%s -> %s (manifest %s)" % (a.ref, a.out, sha256(manifest_b)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
