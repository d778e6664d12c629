#!/usr/bin/env python3
"""Verify webhook requests with the reference Standard Webhooks library.

Usage: python3 verify_standard_webhooks.py < checks.json

Reads ONE JSON document on stdin:
  {"checks": [{"secret": "whsec_...", "body_base64": "...",
               "headers": {"webhook-id": "...", "webhook-timestamp": "...",
                           "webhook-signature": "..."}}, ...]}
and prints ONE JSON line on stdout: {"results": [{"ok": true} | {"ok": false, "error": "..."}]},
one result per check, in order. Each check is `Webhook(secret).verify(body, headers)` from the
`standardwebhooks` package, which also refuses a timestamp more than 5 minutes from now.

Exit codes: 0 ok (whatever the results); 2 bad input;
3 the `standardwebhooks` package (PyPI: standardwebhooks, tested with 1.1.0) is missing.
"""
import base64
import json
import sys

try:
    from standardwebhooks.webhooks import Webhook, WebhookVerificationError
except ImportError as e:
    sys.stderr.write(
        "\n*** verify_standard_webhooks.py: cannot import the Standard Webhooks library (%s).\n"
        "*** Install it with:  python3 -m pip install standardwebhooks\n\n" % e)
    sys.exit(3)


def verify(check):
    """The library's verdict on one request."""
    body = base64.b64decode(check["body_base64"])
    try:
        Webhook(check["secret"]).verify(body, check["headers"], json_parse=False)
        return {"ok": True}
    except WebhookVerificationError as e:
        return {"ok": False, "error": str(e)}


def main():
    try:
        checks = json.load(sys.stdin)["checks"]
    except (ValueError, KeyError, TypeError) as e:
        sys.stderr.write("expected {\"checks\": [...]} on stdin: %s\n" % e)
        return 2
    print(json.dumps({"results": [verify(check) for check in checks]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
