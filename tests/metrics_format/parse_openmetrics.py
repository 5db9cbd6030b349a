"""Parses an OpenMetrics exposition from stdin with prometheus_client's parser (which
rejects anything the format does not allow: a missing `# EOF`, a counter sample not
named `_total`, a unit its family's name does not end with, ...) and prints what it read:
one `# FAMILY name type unit` line per family, then its samples as
`name{label="value",...} value`, labels sorted. Exits non-zero, with the parser's error,
on an invalid exposition."""

import math
import sys

from prometheus_client.openmetrics.parser import text_string_to_metric_families


def number(value):
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def escaped(value):
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def main():
    text = sys.stdin.read()
    for family in text_string_to_metric_families(text):
        print(f"# FAMILY {family.name} {family.type} {family.unit or '-'}")
        for sample in family.samples:
            labels = ",".join(
                f'{key}="{escaped(value)}"' for key, value in sorted(sample.labels.items())
            )
            series = f"{sample.name}{{{labels}}}" if labels else sample.name
            print(f"{series} {number(sample.value)}")


if __name__ == "__main__":
    main()
