package main

import (
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestDisabledAuditStates(t *testing.T) {
	cases := map[string]func(fx *observeFixture) string{
		"no observability file": func(fx *observeFixture) string {
			id := fx.group("Solo", "", time.Now(), fixtureMember{"a", "A"})
			os.Remove(filepath.Join(fx.dir, catalogFileName))
			return id
		},
		"catalog only": func(fx *observeFixture) string {
			return fx.group("Solo", "", time.Now(), fixtureMember{"a", "A"})
		},
	}
	for name, seed := range cases {
		t.Run(name, func(t *testing.T) {
			fx := newObserveFixture(t)
			id := seed(fx)
			obs := newTestObserver(t, fx.dir, time.Second)
			checks := []struct{ path, want string }{
				{"/fragments/overview", "Audit analytics are disabled"},
				{"/fragments/overview", "Tool calls</strong><span>—"},
				{"/fragments/overview", "Solo"},
				{"/fragments/analytics", "Audit data is unavailable"},
				{"/fragments/storage", "No audit database exists yet."},
				{"/fragments/chats?group_id=" + id, "Solo"},
			}
			for _, c := range checks {
				if _, body, _ := get(t, obs, c.path); !strings.Contains(body, c.want) {
					t.Errorf("%s lacks %q", c.path, c.want)
				}
			}
		})
	}
	t.Run("missing directory", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "later")
		obs := newTestObserver(t, dir, time.Second)
		if _, body, _ := get(t, obs, "/fragments/overview"); !strings.Contains(body, "does not exist yet") {
			t.Errorf("overview of a missing directory lacks the notice")
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Fatal("observer created the groups directory")
		}
		fx := &observeFixture{t: t, dir: dir}
		fx.group("Arrived later", "", time.Now(), fixtureMember{"a", "A"})
		if _, body, _ := get(t, obs, "/fragments/overview"); !strings.Contains(body, "Arrived later") {
			t.Errorf("a group created after start does not appear")
		}
	})
}

func TestDeletedGroupStates(t *testing.T) {
	fx := newObserveFixture(t)
	now := time.Now()
	id := seedBasic(fx, now)
	obs := newTestObserver(t, fx.dir, time.Second)
	obs.pollOnce()
	sub := obs.hub.subscribe()
	defer obs.hub.unsubscribe(sub)
	if err := os.Remove(groupFile(fx.dir, id)); err != nil {
		t.Fatal(err)
	}
	os.Remove(groupFile(fx.dir, id) + "-wal")
	os.Remove(groupFile(fx.dir, id) + "-shm")
	obs.pollOnce()
	select {
	case ev := <-sub:
		if want := `event: group.deleted` + "\n" + `data: {"group_id":"` + id + `"}`; !strings.HasPrefix(string(ev), want) {
			t.Errorf("got %q; want %q", ev, want)
		}
	default:
		t.Error("no group.deleted event")
	}
	checks := []struct {
		path   string
		status int
		want   string
	}{
		{"/fragments/chat?group_id=" + id, 200, "Chat unavailable"},
		{"/fragments/analytics", 200, "Project launch (deleted)"},
		{"/fragments/analytics?group_id=grp_" + strings.Repeat("e", 32), 200, `<option value="grp_eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee" selected>Unknown group</option>`},
		{"/fragments/overview-group-row?group_id=" + id, 200, ""},
		{"/fragments/overview", 200, "Groups</strong><span>0"},
	}
	for _, c := range checks {
		code, body, _ := get(t, obs, c.path)
		// An empty want means the "empty" template: the body must be empty.
		if code != c.status || !strings.Contains(body, c.want) || (c.want == "" && body != "") {
			t.Errorf("%s got %d %.300q; want %d containing %q", c.path, code, body, c.status, c.want)
		}
	}
}

// TestDamagedGroupRow shows a group file without the group schema (as a
// kill -9 inside the original's create_group leaves one) as "Damaged" with
// the doctor command, and a healthy group beside it as before.
func TestDamagedGroupRow(t *testing.T) {
	fx := newObserveFixture(t)
	seedBasic(fx, time.Now())
	damaged := "grp_" + strings.Repeat("d", 32)
	db, err := sql.Open("sqlite", sqliteDSN(groupFile(fx.dir, damaged), "rwc"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("CREATE TABLE unrelated (x)"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	obs := newTestObserver(t, fx.dir, time.Second)
	_, body, _ := get(t, obs, "/fragments/overview")
	for _, want := range []string{
		`data-overview-group-id="` + damaged + `"`,
		`>Damaged</span>`,
		"no group schema",
		"crosstalk-mcp doctor --repair",
		"Project launch",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("overview lacks %q", want)
		}
	}
}
