"""Verifies signed pushes as a receiver would, with the Standard Webhooks library.

Reads one JSON object per line on stdin: {"secret": "whsec_...", "headers": {...},
"body": "<base64 of the body as received>"}; prints one line per push, "ok" when the
library accepts it, or "refused: <why>" when it raises.
"""

import base64
import json
import sys

from standardwebhooks import Webhook


def main() -> None:
    for line in sys.stdin:
        check = json.loads(line)
        body = base64.b64decode(check["body"])
        try:
            Webhook(check["secret"]).verify(body, check["headers"], json_parse=False)
            print("ok")
        except Exception as error:  # the library's refusal, whatever its type
            print(f"refused: {type(error).__name__}: {error}")


if __name__ == "__main__":
    main()
