"""gc aborts unfinished S3 multipart uploads (a killed push of a large blob leaves one) past its grace period."""

from __future__ import annotations

import os
from pathlib import Path

from toolchain.registry import open_registry


def test_gc_aborts_stale_multipart_uploads(s3_env: str, tmp_path: Path) -> None:
    import boto3

    bucket = f"mp-{os.getpid()}-{abs(hash(tmp_path)) % 10**8}"
    s3 = boto3.client("s3", endpoint_url=s3_env)
    s3.create_bucket(Bucket=bucket)
    up = s3.create_multipart_upload(Bucket=bucket, Key="engines/blobs/blake3/ab/abcd")
    s3.create_multipart_upload(Bucket=bucket, Key="elsewhere/x")  # outside the registry's prefix
    r = open_registry(f"s3://{bucket}/engines")
    # (moto reports a fixed 2010 'Initiated' time for every upload, so the grace period is not exercised here)
    plan = r.gc_plan(grace_s=0)
    assert plan.uploads == [("engines/blobs/blake3/ab/abcd", up["UploadId"])]
    r.gc(plan)
    left = s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    assert [u["Key"] for u in left] == ["elsewhere/x"]
