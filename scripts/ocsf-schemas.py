"""Writes the OCSF JSON Schemas the tests validate driftwatch's records against
(tests/data/ocsf/<version>/), for each OCSF version driftwatch writes.

    python3 -m venv /tmp/ocsf && /tmp/ocsf/bin/pip install 'ocsf-json-schema==1.2.0'
    /tmp/ocsf/bin/python scripts/ocsf-schemas.py
"""

import json
import pathlib

from ocsf_json_schema import OcsfJsonSchemaEmbedded, get_ocsf_schema

# src/deliver/ocsf/mod.rs: VERSION (the default) and VERSION_1_7 (`format: ocsf-1.7.0`)
VERSIONS = ("1.8.0", "1.7.0")
CLASSES = (2004, 6003)  # Detection Finding, API Activity

root = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "ocsf"
for version in VERSIONS:
    out = root / version
    out.mkdir(parents=True, exist_ok=True)
    schema = OcsfJsonSchemaEmbedded(get_ocsf_schema(version=version))
    for uid in CLASSES:
        name = schema.lookup_class_name_from_uid(class_uid=uid)
        doc = schema.get_class_schema(class_name=name, profiles=[])
        (out / f"{name}.json").write_text(json.dumps(doc, indent=1, sort_keys=True))
