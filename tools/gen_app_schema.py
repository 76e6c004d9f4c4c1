#!/usr/bin/env python3
"""Derives src/template/app_schema.json from Argo CD's Application CRD.

The output is only the tree of property names (no descriptions, no types), which
`driftwatch check` uses to warn about template paths that cannot exist in an
Application. `[]` stands for "any array element", `*` for "any key".

Usage: tools/gen_app_schema.py ../shared/argocd/crds/application-crd.yaml > src/template/app_schema.json
"""
import json
import sys

import yaml


def tree(node, depth=0):
    if depth > 12:
        return {}
    kind = node.get("type")
    if kind == "array":
        return {"[]": tree(node.get("items", {}), depth + 1)}
    if "properties" in node:
        return {k: tree(v, depth + 1) for k, v in node["properties"].items()}
    if kind == "object" or node.get("additionalProperties") or node.get("x-kubernetes-preserve-unknown-fields"):
        return {"*": {}}
    return {}


def main():
    crd = yaml.safe_load(open(sys.argv[1]))
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    out = tree(schema)
    # The CRD leaves ObjectMeta open; spell out the fields templates use.
    out["metadata"] = {
        "name": {}, "namespace": {}, "uid": {}, "generation": {}, "resourceVersion": {},
        "creationTimestamp": {}, "deletionTimestamp": {}, "labels": {"*": {}},
        "annotations": {"*": {}}, "finalizers": {"[]": {}},
        "ownerReferences": {"[]": {"*": {}}}, "managedFields": {"[]": {"*": {}}},
    }
    json.dump(out, sys.stdout, separators=(",", ":"), sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
