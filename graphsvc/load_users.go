package graphsvc

import (
	"context"
	"fmt"
	"strings"

	"github.com/smartfeed/smartfeed/zen"
)

// flushUsers checks the pending users against the stored usernames and emails, reuses the
// existing ones and writes the new ones: object, username claim, email claim.
func (r *loadRun) flushUsers(ctx context.Context) error {
	if len(r.pendU) == 0 {
		return nil
	}
	pend := r.pendU
	r.pendU = nil
	cs := r.checkUsers(pend)
	names, mails := make([]string, len(cs)), make([]string, len(cs))
	for i, c := range cs {
		names[i], mails[i] = c.name, c.email
	}
	byName, err := r.l.g.LookupKeys(ctx, graphKindUsername, names)
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	byMail, err := r.l.g.LookupKeys(ctx, graphKindEmail, mails)
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	live, err := r.holdersLive(ctx, byName, byMail)
	if err != nil {
		return err
	}
	var fresh []userCand
	for i, c := range cs {
		if h := byName[i]; h != 0 && live[h] {
			r.users[c.name], r.old[h] = h, true
			r.st.UsersExisting++
			if r.l.ids != nil {
				r.l.ids("user", c.name, h)
			}
			continue
		}
		if h := byMail[i]; h != 0 && live[h] {
			r.refuse(&r.st.UsersRefused, "user %s: email is taken", c.name)
			continue
		}
		fresh = append(fresh, c)
	}
	if len(fresh) == 0 {
		return nil
	}
	ids, err := r.allocate(ctx, zen.TypeUser, r.nextShards(len(fresh)))
	if err != nil {
		return err
	}
	return r.writeUsers(ctx, fresh, ids)
}

// userCand is a listed user that passed the checks, with its lowercased username and email.
type userCand struct {
	u           LoadUser
	name, email string
}

// checkUsers refuses the listed users whose fields are invalid or that are listed twice (in
// the load or, by email, in one chunk), and returns the rest.
func (r *loadRun) checkUsers(pend []LoadUser) []userCand {
	var cs []userCand
	inChunk := map[string]bool{}
	emails := map[string]bool{}
	for _, u := range pend {
		if err := graphCheckUsername(u.Username); err != nil {
			r.refuse(&r.st.UsersRefused, "user: %s", statusMsg(err))
			continue
		}
		if err := graphCheckEmail(u.Email); err != nil {
			r.refuse(&r.st.UsersRefused, "user %s: %s", u.Username, statusMsg(err))
			continue
		}
		if err := graphCheckText("display_name", u.DisplayName, graphMaxDisplayName, false); err != nil {
			r.refuse(&r.st.UsersRefused, "user %s: %s", u.Username, statusMsg(err))
			continue
		}
		name, email := strings.ToLower(u.Username), strings.ToLower(u.Email)
		if _, dup := r.users[name]; dup || inChunk[name] {
			r.refuse(&r.st.UsersRefused, "user %s: listed twice", name)
			continue
		}
		if emails[email] {
			r.refuse(&r.st.UsersRefused, "user %s: email listed twice in one chunk", name)
			continue
		}
		inChunk[name], emails[email] = true, true
		cs = append(cs, userCand{u, name, email})
	}
	return cs
}

// writeUsers writes the new users' objects and username and email keys, ids[i] for fresh[i].
func (r *loadRun) writeUsers(ctx context.Context, fresh []userCand, ids []zen.ID) error {
	for i, c := range fresh {
		id := ids[i]
		if err := r.b.PutObject(ctx, id, map[string]any{
			"username": c.u.Username, "email": c.email, "display_name": c.u.DisplayName,
			"created_ms": r.createdMs(c.u.CreatedMs),
		}); err != nil {
			return fmt.Errorf("load: %w", err)
		}
		if err := r.b.MapKey(ctx, graphKindUsername, c.name, id); err != nil {
			return fmt.Errorf("load: %w", err)
		}
		if err := r.b.MapKey(ctx, graphKindEmail, c.email, id); err != nil {
			return fmt.Errorf("load: %w", err)
		}
		r.users[c.name] = id
		r.st.Users++
		if r.l.ids != nil {
			r.l.ids("user", c.name, id)
		}
	}
	return nil
}
