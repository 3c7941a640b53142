package main

import (
	"fmt"
	"strings"
	"testing"
)

func TestResourceURIs(t *testing.T) {
	g := "grp_" + strings.Repeat("0a", 16)
	for _, ctx := range []string{"plain", "with/slash", "sp ace", "ü@:?#&=+%", "a.b_c-d~e"} {
		uri := wakeupURI(g, ctx)
		gotG, gotC, err := parseWakeupURI(uri)
		if err != nil || gotG != g || gotC != ctx {
			t.Errorf("round trip %q via %s: got %q %q %v", ctx, uri, gotG, gotC, err)
		}
	}
	if got := wakeupURI(g, "C/x y"); got != "crosstalk://groups/"+g+"/wakeups/C%2Fx%20y" {
		t.Errorf("got %s; want Python's quote(safe='') encoding", got)
	}
	for _, tt := range []struct{ uri, wantErr string }{
		{"crosstalk://groups/" + g + "/messages", ""},
		{"crosstalk://groups/" + g + "/other", "Invalid Crosstalk subscription URI."},
		{"crosstalk://groups/../" + g[3:] + "/messages", "Invalid group_id."},
		{"crosstalk://groups/messages", "Invalid Crosstalk subscription URI."},
	} {
		_, err := parseGroupURI(tt.uri)
		if got := fmt.Sprint(err); (tt.wantErr == "" && err != nil) || (tt.wantErr != "" && got != tt.wantErr) {
			t.Errorf("parseGroupURI(%s): got %v; want %q", tt.uri, err, tt.wantErr)
		}
	}
	if _, _, err := parseWakeupURI("crosstalk://groups/" + g + "/wakeups/%zz"); err != nil {
		t.Errorf("malformed escapes are kept like Python's unquote: %v", err)
	}
}
