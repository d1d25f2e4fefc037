#!/usr/bin/env bash
# dev-secrets.sh DIR [HOSTS]: writes, with openssl alone, every file the Helm chart's two
# Secrets hold, for a test cluster or a local TLS + JWT run (a production install takes its
# certificates from cert-manager and its JWKS from the identity provider: docs/deploy.md):
#
#   DIR/ca.crt DIR/ca.key            a CA (10 days)
#   DIR/tls.crt DIR/tls.key          a server certificate it signed, for HOSTS (comma-separated
#                                    DNS names; default: localhost and the chart's service names
#                                    for release "smartfeed" in namespace "smartfeed"), and 127.0.0.1
#   DIR/signer.key DIR/jwks.json     an RS256 key pair: the private key signs tokens, the JWKS
#                                    (its public key, kid "dev") is what the servers verify with
#   DIR/admin-token                  the admin credential (32 random characters)
#   DIR/generator-token              a JWT (sub smartfeed-feedsvc, scope "generator", 24 h)
#
# and prints how to mint more tokens. Tokens live at most 24 h (--auth-max-token-lifetime).
#   scripts/dev-secrets.sh run/secrets
#   scripts/dev-secrets.sh run/secrets token 'user:123' ''            # a user's token
#   scripts/dev-secrets.sh run/secrets token smartfeed-frontend 'feed:read'
set -euo pipefail

dir="${1:?usage: scripts/dev-secrets.sh DIR [HOSTS] | DIR token SUB SCOPE}"
mkdir -p "$dir"

b64url() { openssl base64 -A | tr '+/' '-_' | tr -d '='; }

# token SUB SCOPE: a JWT signed with DIR/signer.key, valid 24 h.
token() {
	local sub="$1" scope="$2" now header claims
	now=$(date +%s)
	header=$(printf '{"alg":"RS256","typ":"JWT","kid":"dev"}' | b64url)
	if [ -n "$scope" ]; then
		claims=$(printf '{"sub":"%s","scope":"%s","iat":%d,"exp":%d}' "$sub" "$scope" "$now" $((now + 86400)) | b64url)
	else
		claims=$(printf '{"sub":"%s","iat":%d,"exp":%d}' "$sub" "$now" $((now + 86400)) | b64url)
	fi
	printf '%s.%s.%s' "$header" "$claims" \
		"$(printf '%s.%s' "$header" "$claims" | openssl dgst -sha256 -sign "$dir/signer.key" -binary | b64url)"
}

if [ "${2:-}" = "token" ]; then
	token "${3:?sub}" "${4-}"
	echo
	exit 0
fi

hosts="${2:-localhost,smartfeed-feedsvc,smartfeed-graph,smartfeed-generator,smartfeed-worker,smartfeed-feedsvc.smartfeed.svc,smartfeed-graph.smartfeed.svc,smartfeed-generator.smartfeed.svc,smartfeed-generator.smartfeed.svc.cluster.local}"
san="IP:127.0.0.1"
IFS=, read -ra hs <<<"$hosts"
for h in "${hs[@]}"; do san="$san,DNS:$h"; done

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 10 -subj "/CN=smartfeed dev CA" \
	-keyout "$dir/ca.key" -out "$dir/ca.crt" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=${hs[0]}" \
	-keyout "$dir/tls.key" -out "$dir/tls.csr" 2>/dev/null
openssl x509 -req -in "$dir/tls.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial -days 10 \
	-extfile <(printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$san") -out "$dir/tls.crt" 2>/dev/null
rm -f "$dir/tls.csr" "$dir/ca.srl"

openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$dir/signer.key" 2>/dev/null
n=$(openssl rsa -in "$dir/signer.key" -noout -modulus 2>/dev/null | cut -d= -f2 | python3 -c 'import binascii,sys; sys.stdout.buffer.write(binascii.unhexlify(sys.stdin.read().strip()))' | b64url)
printf '{"keys":[{"kty":"RSA","alg":"RS256","use":"sig","kid":"dev","n":"%s","e":"AQAB"}]}\n' "$n" >"$dir/jwks.json"

openssl rand -hex 16 | tr -d '\n' >"$dir/admin-token"
token smartfeed-feedsvc generator >"$dir/generator-token"
chmod 600 "$dir"/*.key "$dir/admin-token" "$dir/generator-token"
echo "wrote $dir: ca.crt ca.key tls.crt tls.key signer.key jwks.json admin-token generator-token"
