// Ready-to-paste setup snippets for an input: the platform's SDK pointed at this Boson, and an
// Events API call. Pure text builders: `secret` is whatever should appear in place of the API
// secret (the real one for Copy, a mask for display), `origin` is Boson's own address.

/** The snippets an input of `platform` needs, most specific first: {id, title, help, text}. */
export function snippetsFor(input, origin, secret) {
  const host = new URL(origin).host;
  const sdk = {
    web: () => webSnippet(input.api_key, origin, host),
    ios: () => iosSnippet(input.api_key, secret, host),
    android: () => androidSnippet(input.api_key, secret, host),
  }[input.platform];
  const list = sdk ? [sdk()] : [];
  list.push(curlSnippet(input.api_key, secret, origin));
  return list;
}

function webSnippet(key, origin, host) {
  const plainHttp = origin.startsWith('http:');
  const lines = [
    "// After loading the mParticle Web SDK (npm @mparticle/web-sdk, or mParticle's loader):",
    `mParticle.init('${key}', {`,
    '  isDevelopmentMode: true, // false in production',
    ...(plainHttp ? [
      "  // This Boson answers plain http: follow the page's scheme, skip the https-only config call.",
      '  forceHttps: false,',
      '  requestConfig: false,',
    ] : []),
    `  v1SecureServiceUrl: '${host}/v1/JS/',`,
    `  v2SecureServiceUrl: '${host}/v2/JS/',`,
    `  v3SecureServiceUrl: '${host}/v3/JS/',`,
    `  configUrl: '${host}/JS/v2/',`,
    `  identityUrl: '${host}/v1/',`,
    `  aliasUrl: '${host}/v1/identity/',`,
    '});',
  ];
  return {
    id: 'web', title: 'Web SDK',
    help: 'Every host option of the Web SDK points at this Boson (host and path, no scheme). The key is public: it ships in the page. Set Allowed origins below to accept this key only from your own sites.',
    text: lines.join('\n'),
  };
}

function iosSnippet(key, secret, host) {
  const hosts = ['configHost', 'eventsHost', 'eventsTrackingHost', 'identityHost', 'identityTrackingHost', 'aliasHost', 'aliasTrackingHost'];
  return {
    id: 'ios', title: 'iOS SDK (Swift)',
    help: 'The iOS SDK always uses https: serve Boson with a certificate the device trusts (BOSON_TLS_CERT and BOSON_TLS_KEY) at an address the devices reach. The tracking hosts are used once the user allows tracking (ATT).',
    text: [
      'import mParticle_Apple_SDK',
      '',
      `let options = MParticleOptions(key: "${key}", secret: "${secret}")`,
      'let network = MPNetworkOptions()',
      ...hosts.map((name) => `network.${name} = "${host}"`),
      'options.networkOptions = network',
      'MParticle.sharedInstance().start(with: options)',
    ].join('\n'),
  };
}

function androidSnippet(key, secret, host) {
  const mappings = ['configMapping', 'eventsMapping', 'identityMapping', 'aliasMapping'];
  return {
    id: 'android', title: 'Android SDK (Kotlin)',
    help: "The Android SDK always uses https and pins certificates to common public roots (Let's Encrypt among them): serve Boson with such a certificate (BOSON_TLS_CERT and BOSON_TLS_KEY) at an address the devices reach.",
    text: [
      `val boson = "${host}"`,
      'val options = MParticleOptions.builder(this)',
      `    .credentials("${key}", "${secret}")`,
      '    .networkOptions(',
      '        NetworkOptions.builder()',
      ...mappings.map((m) => `            .addDomainMapping(DomainMapping.${m}(boson).build())`),
      '            .build()',
      '    )',
      '    .build()',
      'MParticle.start(options)',
    ].join('\n'),
  };
}

function curlSnippet(key, secret, origin) {
  const batch = [
    '{"environment": "development",',
    '  "user_identities": {"customer_id": "1234"},',
    '  "events": [{"event_type": "custom_event",',
    '              "data": {"event_name": "Hello from Boson", "custom_event_type": "other"}}]}',
  ].join('\n');
  return {
    id: 'curl', title: 'Events API (curl)',
    help: "Server-side sending: HTTP Basic auth with the key as user and the secret as password, a batch in mParticle's Events API format. Boson answers 202 once the batch is stored.",
    text: [
      `curl -sS --fail-with-body -u '${key}:${secret}' \\`,
      "  -H 'Content-Type: application/json' \\",
      `  ${origin}/v2/events \\`,
      `  -d '${batch}'`,
    ].join('\n'),
  };
}
