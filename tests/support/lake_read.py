"""Reads back every object of a bucket of the S3 server at argv[1] (argv[2]: the
bucket) with pyarrow, as one JSON line per object: its key, its Parquet schema's
top-level columns, and its rows (nulls left out: Parquet reads a missing attribute as
null, and OCSF's schema has no nulls)."""

import io
import json
import os
import sys

import boto3
import pyarrow.parquet as pq


def without_nulls(v):
    if isinstance(v, dict):
        return {k: without_nulls(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [without_nulls(x) for x in v if x is not None]
    return v


s3 = boto3.client("s3", endpoint_url=sys.argv[1], region_name="eu-west-1",
                  aws_access_key_id="test", aws_secret_access_key="test")
keys = []
for page in s3.get_paginator("list_objects_v2").paginate(Bucket=sys.argv[2]):
    keys.extend(o["Key"] for o in page.get("Contents", []))
for key in sorted(keys):
    body = s3.get_object(Bucket=sys.argv[2], Key=key)["Body"].read()
    table = pq.read_table(io.BytesIO(body))
    rows = [without_nulls(r) for r in table.to_pylist()]
    print(json.dumps({"key": key, "columns": table.schema.names, "rows": rows}, default=str))
print(json.dumps({"end": len(keys)}))
sys.stdout.flush()
# pyarrow's thread pools can abort the interpreter's teardown ("terminate called
# without an active exception"): everything is printed, so leave without it.
os._exit(0)
