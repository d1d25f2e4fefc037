package pinlater

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// A namespace's lifecycle in Redis: a deployment claims it (ClaimNamespace), and Purge deletes
// everything in it.

// Purge deletes the queues of this admin's namespace (their tasks in every state, pause marks
// and stats) and its pinlater keys (rates, drain marks, the owner, rate-limit states, orphan
// marks). On the default (empty) namespace, which shares its key space with the named ones, it
// deletes only what is the default namespace's for certain: the queues whose names have no
// '-' (a named namespace's queues are "<ns>-<queue>") and pinlater's keys of the default
// layout; named namespaces in the same database are left alone.
func (a *Admin) Purge(ctx context.Context) error {
	phys, err := a.insp.Queues()
	if err != nil {
		return fmt.Errorf("purge: %w", err)
	}
	var own []string
	for _, q := range QueueNames() {
		own = append(own, a.keys.queue(q))
	}
	for _, p := range phys {
		if a.owns(p) && !slices.Contains(own, p) {
			own = append(own, p)
		}
	}
	for _, p := range own {
		// DeleteQueue refuses a queue with active tasks (the workers of a deployment that is
		// gone leave some); deleting its keys below removes them all the same.
		if err := a.insp.DeleteQueue(p, true); err != nil && !errors.Is(err, asynq.ErrQueueNotFound) && !queueNotFound(err) {
			if err := a.rdb.SRem(ctx, asynqAllQueues, p).Err(); err != nil {
				return fmt.Errorf("purge queue %s: %w", p, err)
			}
		}
		// Pause marks and stats outlive DeleteQueue.
		if err := a.rdb.SRem(ctx, asynqOldPausedQueues, p).Err(); err != nil {
			return fmt.Errorf("purge queue %s: %w", p, err)
		}
		if err := a.delMatching(ctx, asynqQueuePattern(p)); err != nil {
			return fmt.Errorf("purge queue %s: %w", p, err)
		}
	}
	pre := a.keys.prefix()
	if a.keys.ns != "" {
		if err := a.delMatching(ctx, escapeGlob(pre)+"*"); err != nil {
			return fmt.Errorf("purge: %w", err)
		}
		return nil
	}
	// The default layout: "pinlater:<key>", where a named namespace's keys are
	// "pinlater:<ns>:<key>"; each pattern below matches no key of a named namespace.
	if err := a.rdb.Del(ctx, a.keys.rates(), a.keys.draining(), pre+"owner").Err(); err != nil {
		return fmt.Errorf("purge: %w", err)
	}
	patterns := []string{pre + "orphan:" + strings.Repeat("[0-9a-f]", 32)}
	for _, p := range own {
		q, _ := a.keys.logical(p)
		patterns = append(patterns, escapeGlob(a.keys.rateState(q)), escapeGlob(a.keys.reservation(q, ""))+"*")
	}
	for _, pat := range patterns {
		if err := a.delMatching(ctx, pat); err != nil {
			return fmt.Errorf("purge: %w", err)
		}
	}
	return nil
}

// owns reports whether the asynq queue phys belongs to this admin's namespace (see Purge for
// the default namespace's rule).
func (a *Admin) owns(phys string) bool {
	if a.keys.ns == "" {
		return !strings.Contains(phys, "-")
	}
	_, ok := a.keys.logical(phys)
	return ok
}

// delMatching deletes the keys matching the glob pattern, scanning (not KEYS, which blocks a
// large Redis). On a Redis Cluster it scans every primary, and deletes key by key (in a
// pipeline): one DEL of keys in several hash slots is refused there.
func (a *Admin) delMatching(ctx context.Context, pattern string) error {
	if cc, ok := a.rdb.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			return delMatchingOn(ctx, node, pattern, true)
		})
	}
	return delMatchingOn(ctx, a.rdb, pattern, false)
}

// delMatchingOn deletes the keys of one server matching pattern, 500 at a time: in one DEL, or
// one DEL per key when oneByOne.
func delMatchingOn(ctx context.Context, rdb redis.UniversalClient, pattern string, oneByOne bool) error {
	del := func(batch []string) error {
		if !oneByOne {
			return rdb.Del(ctx, batch...).Err()
		}
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range batch {
				p.Del(ctx, k)
			}
			return nil
		})
		return err
	}
	it := rdb.Scan(ctx, 0, pattern, 500).Iterator()
	var batch []string
	for it.Next(ctx) {
		batch = append(batch, it.Val())
		if len(batch) == 500 {
			if err := del(batch); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	if err := it.Err(); err != nil {
		return err
	}
	if len(batch) > 0 {
		return del(batch)
	}
	return nil
}

// escapeGlob escapes the characters Redis's MATCH patterns treat specially.
func escapeGlob(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// ErrNamespaceOwned is returned by ClaimNamespace when another deployment owns the namespace.
var ErrNamespaceOwned = errors.New("the Redis namespace belongs to another deployment")

// ClaimNamespace marks this admin's namespace as owned by deployment (an ID the deployment keeps
// in its own store), or checks that it already is. Two deployments sharing a namespace by
// mistake would run each other's tasks against the wrong store; the second one to start gets
// ErrNamespaceOwned, naming the owner. With takeover, a namespace owned by another deployment
// (one that is gone) is purged of its queues and keys and claimed; previous is the owner it had.
func (a *Admin) ClaimNamespace(ctx context.Context, deployment string, takeover bool) (previous string, err error) {
	if deployment == "" {
		return "", errors.New("claim namespace: empty deployment ID")
	}
	key := a.keys.prefix() + "owner"
	ok, err := a.rdb.SetNX(ctx, key, deployment, 0).Result()
	if err != nil {
		return "", fmt.Errorf("claim namespace: %w", err)
	}
	if ok {
		return "", nil
	}
	cur, err := a.rdb.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return a.ClaimNamespace(ctx, deployment, takeover) // released meanwhile
	}
	if err != nil {
		return "", fmt.Errorf("claim namespace: %w", err)
	}
	if cur == deployment {
		return "", nil
	}
	if !takeover {
		return cur, fmt.Errorf("namespace %q: %w (owner %s; this deployment is %s)", a.keys.ns, ErrNamespaceOwned, cur, deployment)
	}
	if err := a.Purge(ctx); err != nil {
		return cur, fmt.Errorf("claim namespace: take over: %w", err)
	}
	if err := a.rdb.Set(ctx, key, deployment, 0).Err(); err != nil {
		return cur, fmt.Errorf("claim namespace: %w", err)
	}
	return cur, nil
}
