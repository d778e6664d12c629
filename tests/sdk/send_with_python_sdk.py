#!/usr/bin/env python3
"""Send mParticle batches to a Boson server with the official Python SDK.

Usage: python3 send_with_python_sdk.py <base_url> <api_key> <api_secret>
  e.g. python3 send_with_python_sdk.py http://127.0.0.1:8080 key secret

Sends one batch with EventsApi.upload_events   (POST <base_url>/v2/events)
and two batches with EventsApi.bulk_upload_events (POST <base_url>/v2/bulkevents),
then prints ONE JSON line on stdout describing what was sent.

Exit codes: 0 ok; 1 API error / non-2xx / connection failure; 2 bad usage;
3 the `mparticle` package (PyPI: mparticle, tested with 0.16.1) is missing.
"""
import json
import random
import sys
import time
import uuid

try:
    import mparticle
    from mparticle.rest import ApiException
except ImportError as e:
    sys.stderr.write(
        "\n*** send_with_python_sdk.py: cannot import the mParticle Python SDK (%s).\n"
        "*** Install it with:  python3 -m pip install mparticle\n\n" % e)
    sys.exit(3)


def build_batch(tag, mpid):
    """One fully populated batch; returns (batch, summary of what is in it)."""
    now_ms = int(time.time() * 1000)
    batch = mparticle.Batch()
    batch.environment = 'development'
    # The SDK never fills source_request_id, schema_version or timestamps
    # itself: set them so Boson (and the test) can find this exact batch.
    batch.source_request_id = str(uuid.uuid4())
    batch.schema_version = 2
    batch.mpid = mpid  # an int: the SDK serialises it as a JSON number

    ids = mparticle.UserIdentities()
    # NB: the Python SDK's field (and JSON key!) is "customerid", not "customer_id".
    ids.customerid = 'py-cust-%s' % tag
    ids.email = 'py-%s@example.com' % tag
    batch.user_identities = ids
    batch.user_attributes = {'plan': 'trial', 'tags': ['a', 'b']}  # strings or string lists

    dev = mparticle.DeviceInformation()
    dev.platform = 'web'
    dev.os_version = '14'
    dev.device_model = 'python-sdk'
    dev.locale_language = 'en'
    dev.android_advertising_id = str(uuid.uuid4())  # SDK validates it is a UUID
    batch.device_info = dev

    app = mparticle.ApplicationInformation()
    app.application_name = 'boson-sdk-test'
    app.application_version = '1.2.3'
    batch.application_info = app

    session_id = random.randint(1, 2**31)
    session = mparticle.SessionStartEvent()
    session.session_id = session_id
    session.timestamp_unixtime_ms = now_ms

    # The SDK calls a custom event "AppEvent"; args are (event_name, custom_event_type).
    custom = mparticle.AppEvent('py_custom_%s' % tag, 'navigation')
    custom.custom_attributes = {'button': 'buy', 'count': 3}
    custom.session_id = session_id
    custom.timestamp_unixtime_ms = now_ms + 1

    screen = mparticle.ScreenViewEvent()
    screen.screen_name = 'py_screen_%s' % tag
    screen.session_id = session_id
    screen.timestamp_unixtime_ms = now_ms + 2

    product = mparticle.Product(id='sku-1', name='Widget', brand='Acme',
                                category='tools', price=19.99, quantity=2,
                                total_product_amount=39.98)
    action = mparticle.ProductAction('purchase')
    action.transaction_id = 'tx-%s' % tag
    action.affiliation = 'web-store'
    action.total_amount = 45.48
    action.tax_amount = 3.5
    action.shipping_amount = 2.0
    action.coupon_code = 'SAVE5'
    action.products = [product]
    commerce = mparticle.CommerceEvent(action)
    commerce.currency_code = 'USD'
    commerce.session_id = session_id
    commerce.timestamp_unixtime_ms = now_ms + 3

    # Use the `events` SETTER: it wraps each model in {"event_type", "data"}.
    # Passing events= to Batch(...) skips that wrapping and sends bare models.
    batch.events = [session, custom, screen, commerce]

    summary = {
        'source_request_id': batch.source_request_id,
        'mpid': mpid,
        'customer_id': ids.customerid,
        'email': ids.email,
        'session_id': session_id,
        'events': [
            {'event_type': 'session_start'},
            {'event_type': 'custom_event', 'event_name': custom.event_name},
            {'event_type': 'screen_view', 'screen_name': screen.screen_name},
            {'event_type': 'commerce_event', 'transaction_id': action.transaction_id},
        ],
    }
    return batch, summary


def check(what, result):
    # Without a callback the SDK returns (data, status, headers); it already
    # raises ApiException for any status outside 200..205, this is belt and braces.
    status = result[1]
    if not 200 <= status < 300:
        fail('%s: HTTP %s' % (what, status))
    return status


def fail(msg):
    sys.stderr.write('send_with_python_sdk.py: FAILED: %s\n' % msg)
    sys.exit(1)


def main():
    if len(sys.argv) != 4:
        sys.stderr.write(__doc__)
        sys.exit(2)
    base_url, api_key, api_secret = sys.argv[1:]

    config = mparticle.Configuration()
    # `host` is the base INCLUDING the version: the SDK appends only
    # "/events" or "/bulkevents" (default is https://s2s.mparticle.com/v2).
    # A plain http:// URL works; verify_ssl only matters for https.
    config.host = base_url.rstrip('/') + '/v2'
    config.api_key = api_key        # sent as HTTP Basic user
    config.api_secret = api_secret  # sent as HTTP Basic password
    # Always pass the config: EventsApi's default argument is one shared
    # Configuration() created at import time (pointing at mParticle itself).
    api = mparticle.EventsApi(config)

    base_mpid = random.randint(2**60, 2**62)  # > 2**53: checks 64-bit ints survive
    single, single_info = build_batch('single', base_mpid)
    bulk = [build_batch('bulk%d' % i, base_mpid + i) for i in (1, 2)]

    try:
        s1 = check('upload_events', api.upload_events(single))
        s2 = check('bulk_upload_events', api.bulk_upload_events([b for b, _ in bulk]))
    except ApiException as e:
        # str(e) carries status, reason, response headers and body.
        fail('API error from %s: %s' % (config.host, e))
    except Exception as e:  # connection refused, timeouts (urllib3 errors), ...
        fail('could not reach %s: %s: %s' % (config.host, type(e).__name__, e))

    print(json.dumps({
        'sdk': 'mparticle-python',
        'host': config.host,
        'api_key': api_key,
        'single': dict(single_info, status=s1),
        'bulk': {'status': s2, 'batches': [info for _, info in bulk]},
    }, sort_keys=True))


if __name__ == '__main__':
    main()
