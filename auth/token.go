// Package auth authenticates and authorizes the callers of SmartFeed's gRPC services: bearer
// tokens (JWTs signed with a key of a configured JSON Web Key Set) name a user or a service and
// its scopes; one interceptor checks every method against a table (Policy) of who may call it.
package auth

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/smartfeed/smartfeed/zen"
)

// Scopes a service token may carry.
const (
	// ScopeFeedRead reads any user's feed (a frontend's backend, the bench).
	ScopeFeedRead = "feed:read"
	// ScopeGraphWrite writes the graph on behalf of any user (signup, moderation, imports).
	ScopeGraphWrite = "graph:write"
	// ScopeIngest publishes upstream events (IngestService).
	ScopeIngest = "ingest:publish"
	// ScopeGenerator calls the generator (the feed role of a split deployment).
	ScopeGenerator = "generator"
)

// userPrefix starts the subject of a user's token: "user:<decimal zen ID>".
const userPrefix = "user:"

// ErrUnauthenticated is wrapped by every token verification failure.
var ErrUnauthenticated = errors.New("unauthenticated")

// Principal is who a verified token speaks for.
type Principal struct {
	// Subject is the token's "sub": "user:<id>" for a user, a service's name otherwise.
	Subject string
	// User is the user a user token names (0 for a service).
	User zen.ID
	// Scopes are the token's scopes (its space-separated "scope" claim). They grant service
	// powers only to a service token (User 0): the Authorizer ignores them on a user's token.
	Scopes map[string]bool
}

// Has reports whether p carries any of scopes.
func (p Principal) Has(scopes ...string) bool {
	for _, s := range scopes {
		if p.Scopes[s] {
			return true
		}
	}
	return false
}

// maxToken bounds a bearer token's size before it is parsed.
const maxToken = 8 << 10

// algs are the signature algorithms a token may use (no "none", no ambiguity with key types:
// go-jose refuses a key whose type does not fit the algorithm).
var algs = []jose.SignatureAlgorithm{jose.RS256, jose.PS256, jose.ES256, jose.EdDSA, jose.HS256}

// DefaultMaxLifetime is the longest lifetime (exp minus iat) a token may have unless
// WithMaxLifetime says otherwise.
const DefaultMaxLifetime = 24 * time.Hour

// VerifierOption configures a Verifier.
type VerifierOption func(*Verifier)

// WithMaxLifetime refuses tokens whose lifetime (exp minus iat; exp minus nbf, or minus the
// verification time, for a token without iat) is longer than d. d <= 0 keeps
// DefaultMaxLifetime. A stolen token is useful at most this long, whatever its issuer chose.
func WithMaxLifetime(d time.Duration) VerifierOption {
	return func(v *Verifier) {
		if d > 0 {
			v.maxLifetime = d
		}
	}
}

// Verifier checks bearer tokens against the keys of a JWKS file, which it reloads when the file
// changes (key rotation without a restart).
type Verifier struct {
	path             string
	issuer, audience string
	now              func() time.Time
	maxLifetime      time.Duration

	mu      sync.Mutex
	keys    jose.JSONWebKeySet
	modTime time.Time
	checked time.Time
}

// NewVerifier loads the JWKS at path. issuer and audience, when not empty, must match the
// tokens' "iss" and "aud". now nil means time.Now. Tokens longer-lived than
// DefaultMaxLifetime are refused unless an option says otherwise.
func NewVerifier(path, issuer, audience string, now func() time.Time, opts ...VerifierOption) (*Verifier, error) {
	if now == nil {
		now = time.Now
	}
	v := &Verifier{path: path, issuer: issuer, audience: audience, now: now, maxLifetime: DefaultMaxLifetime}
	for _, o := range opts {
		o(v)
	}
	if err := v.reload(true); err != nil {
		return nil, err
	}
	return v, nil
}

// reload re-reads the key set when the file changed (checked at most once a second unless
// force).
func (v *Verifier) reload(force bool) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	now := time.Now()
	if !force && now.Sub(v.checked) < time.Second {
		return nil
	}
	v.checked = now
	st, err := os.Stat(v.path)
	if err != nil {
		return fmt.Errorf("auth: key set: %w", err)
	}
	if !force && st.ModTime().Equal(v.modTime) {
		return nil
	}
	b, err := os.ReadFile(v.path)
	if err != nil {
		return fmt.Errorf("auth: key set: %w", err)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(b, &set); err != nil {
		return fmt.Errorf("auth: key set %s: %w", v.path, err)
	}
	if len(set.Keys) == 0 {
		return fmt.Errorf("auth: key set %s has no keys", v.path)
	}
	for i, k := range set.Keys {
		if !k.Valid() {
			return fmt.Errorf("auth: key set %s: key %d (%q) is not valid", v.path, i, k.KeyID)
		}
	}
	v.keys, v.modTime = set, st.ModTime()
	return nil
}

// claims are the token claims read besides the registered ones.
type claims struct {
	Scope string `json:"scope"`
}

// verifiedClaims returns the claims of tok (which has one signature) when a configured key
// verifies its signature: the key named by its header, or else any key, of its algorithm and
// for signing.
func (v *Verifier) verifiedClaims(tok *jwt.JSONWebToken) (jwt.Claims, claims, bool) {
	h := tok.Headers[0]
	v.mu.Lock()
	var cands []jose.JSONWebKey
	if h.KeyID != "" {
		cands = v.keys.Key(h.KeyID)
	} else {
		cands = v.keys.Keys
	}
	v.mu.Unlock()
	for _, k := range cands {
		if k.Algorithm != "" && k.Algorithm != h.Algorithm {
			continue
		}
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		var std jwt.Claims
		var extra claims
		if err := tok.Claims(k.Key, &std, &extra); err == nil {
			return std, extra, true
		}
	}
	return jwt.Claims{}, claims{}, false
}

// Verify checks a bearer token and returns its principal. Every failure wraps
// ErrUnauthenticated and says why without echoing the token.
func (v *Verifier) Verify(raw string) (Principal, error) {
	fail := func(why string, args ...any) (Principal, error) {
		return Principal{}, fmt.Errorf("%w: %s", ErrUnauthenticated, fmt.Sprintf(why, args...))
	}
	if raw == "" {
		return fail("no bearer token")
	}
	if len(raw) > maxToken {
		return fail("token of %d bytes (at most %d)", len(raw), maxToken)
	}
	// A bad edit of the key file keeps the keys loaded last: it must not lock everyone out.
	_ = v.reload(false)
	tok, err := jwt.ParseSigned(raw, algs)
	if err != nil {
		return fail("malformed token")
	}
	if len(tok.Headers) != 1 {
		return fail("token with %d signatures", len(tok.Headers))
	}
	std, extra, verified := v.verifiedClaims(tok)
	if !verified {
		return fail("signature not verified by any configured key")
	}
	if std.Expiry == nil {
		return fail("token without an expiry")
	}
	now := v.now()
	start := now
	switch {
	case std.IssuedAt != nil:
		start = std.IssuedAt.Time()
	case std.NotBefore != nil:
		start = std.NotBefore.Time()
	}
	if life := std.Expiry.Time().Sub(start); life > v.maxLifetime {
		return fail("token lifetime %s is longer than the %s this server accepts (auth.max_token_lifetime): ask the identity provider for a shorter-lived token", life.Round(time.Second), v.maxLifetime)
	}
	exp := jwt.Expected{Time: now}
	if v.issuer != "" {
		exp.Issuer = v.issuer
	}
	if v.audience != "" {
		exp.AnyAudience = jwt.Audience{v.audience}
	}
	if err := std.ValidateWithLeeway(exp, 30*time.Second); err != nil {
		switch {
		case errors.Is(err, jwt.ErrExpired):
			return fail("token expired")
		case errors.Is(err, jwt.ErrNotValidYet), errors.Is(err, jwt.ErrIssuedInTheFuture):
			return fail("token not valid yet")
		case errors.Is(err, jwt.ErrInvalidIssuer):
			return fail("wrong issuer")
		case errors.Is(err, jwt.ErrInvalidAudience):
			return fail("wrong audience")
		}
		return fail("invalid claims")
	}
	p := Principal{Subject: std.Subject, Scopes: map[string]bool{}}
	if p.Subject == "" {
		return fail("token without a subject")
	}
	if rest, ok := strings.CutPrefix(p.Subject, userPrefix); ok {
		id, err := zen.ParseID(rest)
		if err != nil || id.Type() != zen.TypeUser {
			return fail("subject is not user:<user id>")
		}
		p.User = id
	}
	for _, s := range strings.Fields(extra.Scope) {
		p.Scopes[s] = true
	}
	return p, nil
}

// UserSubject is the "sub" of a token for user id.
func UserSubject(id zen.ID) string { return userPrefix + id.String() }
