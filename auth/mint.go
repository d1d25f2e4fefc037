package auth

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// Token is what Mint puts in a token.
type Token struct {
	Subject  string   // "user:<id>" (UserSubject) or a service name
	Scopes   []string // granted scopes
	Issuer   string
	Audience string
	TTL      time.Duration // lifetime from now; 0 means one hour
	Now      time.Time     // issue time; zero means time.Now
}

// Mint signs t with key (a private JWK with a key ID). It is how tests, the bench and a
// development setup get tokens; production tokens come from the identity provider whose public
// keys the JWKS file holds.
func Mint(key jose.JSONWebKey, t Token) (string, error) {
	alg := jose.SignatureAlgorithm(key.Algorithm)
	if alg == "" {
		alg = jose.EdDSA
	}
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		return "", fmt.Errorf("mint: %w", err)
	}
	now := t.Now
	if now.IsZero() {
		now = time.Now()
	}
	ttl := t.TTL
	if ttl == 0 {
		ttl = time.Hour
	}
	std := jwt.Claims{Subject: t.Subject, Issuer: t.Issuer, IssuedAt: jwt.NewNumericDate(now),
		NotBefore: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(now.Add(ttl))}
	if t.Audience != "" {
		std.Audience = jwt.Audience{t.Audience}
	}
	extra := map[string]any{}
	if len(t.Scopes) > 0 {
		s := ""
		for i, sc := range t.Scopes {
			if i > 0 {
				s += " "
			}
			s += sc
		}
		extra["scope"] = s
	}
	raw, err := jwt.Signed(sig).Claims(std).Claims(extra).Serialize()
	if err != nil {
		return "", fmt.Errorf("mint: %w", err)
	}
	return raw, nil
}

// NewKey makes an Ed25519 signing key with a random key ID, and the JWKS (JSON) of its public
// half, the file a Verifier reads.
func NewKey() (private jose.JSONWebKey, jwks []byte, err error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return jose.JSONWebKey{}, nil, fmt.Errorf("new key: %w", err)
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	kid := hex.EncodeToString(id[:])
	private = jose.JSONWebKey{Key: priv, KeyID: kid, Algorithm: string(jose.EdDSA), Use: "sig"}
	set := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: pub, KeyID: kid, Algorithm: string(jose.EdDSA), Use: "sig"}}}
	jwks, err = json.Marshal(set)
	if err != nil {
		return jose.JSONWebKey{}, nil, fmt.Errorf("new key: %w", err)
	}
	return private, jwks, nil
}
