package auth

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestPolicyMatchesDocs holds Policy to the method table in docs/security.md, the statement of
// who may call what that operators read: every documented method has the documented rule, and
// every method in Policy is documented. TestAuthMatrix (cmd/smartfeed) then checks that the
// servers enforce Policy, so together the servers are checked against the documented table, not
// against themselves.
func TestPolicyMatchesDocs(t *testing.T) {
	b, err := os.ReadFile("../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "| method | no token | a user's token | service scopes |")
	if !ok {
		t.Fatal("docs/security.md: the method table's header is gone")
	}
	ticked := regexp.MustCompile("`([^`]+)`")
	documented := map[string]Rule{}
	for _, line := range strings.Split(table, "\n")[2:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 4 {
			t.Fatalf("docs/security.md: row %q: want 4 cells", line)
		}
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		methods, anon, user, scopes := cells[0], cells[1], cells[2], cells[3]
		if methods == "health, reflection" || strings.HasPrefix(methods, "FeedAdmin/") {
			continue // health and reflection: Public in Policy; FeedAdmin: not on this port
		}
		var r Rule
		r.Public = anon == "yes"
		switch {
		case user == "any":
			r.AnyCaller = true
		case strings.HasPrefix(user, "self"):
			r.Self = ticked.FindStringSubmatch(user)[1]
		case strings.HasPrefix(user, "owner"):
			r.Owner = ticked.FindStringSubmatch(user)[1]
		case user != "no":
			t.Fatalf("docs/security.md: row %q: user column %q", methods, user)
		}
		if scopes != "any" {
			for _, m := range ticked.FindAllStringSubmatch(scopes, -1) {
				r.Scopes = append(r.Scopes, m[1])
			}
		}
		svc, names, ok := strings.Cut(methods, "/")
		if !ok {
			t.Fatalf("docs/security.md: row %q: want Service/Method, …", methods)
		}
		names, _, _ = strings.Cut(names, " (") // a remark in parentheses
		for _, n := range strings.Split(names, ",") {
			documented[svc+"/"+strings.TrimSpace(n)] = r
		}
	}
	inPolicy := map[string]Rule{}
	for full, r := range Policy {
		if strings.HasPrefix(full, "/grpc.") {
			continue
		}
		// "/smartfeed.feed.v1.FeedService/GetFeed" -> "FeedService/GetFeed"
		s := strings.TrimPrefix(full, "/")
		svc, m, _ := strings.Cut(s, "/")
		svc = svc[strings.LastIndexByte(svc, '.')+1:]
		r.Scopes = slices.Clone(r.Scopes)
		inPolicy[svc+"/"+m] = r
	}
	if diff := cmp.Diff(documented, inPolicy); diff != "" {
		t.Errorf("auth.Policy differs from the table in docs/security.md (-docs +Policy):\n%s", diff)
	}
}
