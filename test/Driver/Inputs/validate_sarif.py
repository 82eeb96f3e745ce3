"""Checks a SARIF 2.1.0 log for the structure code scanning tools require,
and prints its results one a line for FileCheck:
  RULE LEVEL URI:LINE:COL MESSAGE | related URI:LINE:COL MESSAGE ...
Exits 1, naming what is wrong, when the structure is not there."""
import json
import sys

log = json.load(open(sys.argv[1]))
problems = []
if not isinstance(log, dict):
    print("invalid SARIF: the log is not a JSON object")
    sys.exit(1)


def need(cond, what):
    if not cond:
        problems.append(what)
    return cond


def region(loc, where):
    phys = loc.get("physicalLocation", {})
    uri = phys.get("artifactLocation", {}).get("uri")
    reg = phys.get("region", {})
    need(isinstance(uri, str) and uri, where + ".physicalLocation.artifactLocation.uri")
    need(isinstance(reg.get("startLine"), int) and reg["startLine"] >= 1, where + ".region.startLine")
    need(isinstance(reg.get("startColumn"), int) and reg["startColumn"] >= 1, where + ".region.startColumn")
    return f"{uri}:{reg.get('startLine')}:{reg.get('startColumn')}"


need(log.get("version") == "2.1.0", "version 2.1.0")
need("sarif-2.1.0" in log.get("$schema", ""), "$schema of SARIF 2.1.0")
runs = log.get("runs")
if need(isinstance(runs, list) and len(runs) == 1, "one run"):
    run = runs[0]
    driver = run.get("tool", {}).get("driver", {})
    need(driver.get("name") == "mdlc", "runs[0].tool.driver.name")
    rules = driver.get("rules")
    need(isinstance(rules, list), "runs[0].tool.driver.rules")
    ids = [r.get("id") for r in rules or []]
    need(len(set(ids)) == len(ids), "distinct rule ids")
    for i, res in enumerate(run.get("results", [])):
        where = f"results[{i}]"
        rule = res.get("ruleId")
        need(rule in ids, where + ".ruleId names a rule")
        need(ids.index(rule) == res.get("ruleIndex") if rule in ids else False, where + ".ruleIndex")
        need(res.get("level") in ("error", "warning", "note", "none"), where + ".level")
        text = res.get("message", {}).get("text")
        need(isinstance(text, str) and text, where + ".message.text")
        locs = res.get("locations", [])
        need(len(locs) == 1, where + ".locations")
        line = f"{rule} {res.get('level')} {region(locs[0], where + '.locations[0]') if locs else '-'} {text}"
        for j, rel in enumerate(res.get("relatedLocations", [])):
            need(rel.get("id") == j, f"{where}.relatedLocations[{j}].id")
            line += f" | related {region(rel, f'{where}.relatedLocations[{j}]')} {rel.get('message', {}).get('text')}"
        print(line)
if problems:
    print("invalid SARIF: " + "; ".join(problems))
    sys.exit(1)
print("valid SARIF 2.1.0")
