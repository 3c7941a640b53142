package main

import (
	"bytes"
	"cmp"
	"crypto/subtle"
	"embed"
	"fmt"
	"html/template"
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// dashboardView is the full page: the shell plus the one view its address
// names ("/?view=chats&group_id=…"), so that a reload, Back or a shared link
// opens where the user was, also without JavaScript.
type dashboardView struct {
	CSRFToken string
	View      string // overview, chats, analytics or storage; headings are the template's
	Panel     any
}

// dashboardView reads the page for the view r's ?view= names, else Overview;
// the CSRF token rides in a meta tag for the script's maintenance POSTs.
func (o *observer) dashboardView(r *http.Request) dashboardView {
	v := dashboardView{CSRFToken: o.csrfToken, View: r.URL.Query().Get("view")}
	if v.View != "chats" && v.View != "analytics" && v.View != "storage" {
		v.View = "overview"
	}
	v.Panel = o.panels()[v.View](r)
	return v
}

//go:embed static
var staticFiles embed.FS

// pageTemplates holds every page and fragment, parsed on first use so that
// the stdio server, which never renders a page, does not pay for it.
var pageTemplates = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("").ParseFS(staticFiles, "static/*.html"))
})

// staticHandler serves the embedded assets. Browsers revalidate them on each
// load (they are tiny) so an upgraded binary never shows stale scripts.
func staticHandler() http.HandlerFunc {
	files := http.FileServerFS(staticFiles) // at /static/, as the paths are
	return func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, ".html") || strings.HasSuffix(r.URL.Path, "/") {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	}
}

// renderPage executes one template into a buffer first, so a template error
// becomes a clean 500 instead of half a page.
func (o *observer) renderPage(w http.ResponseWriter, r *http.Request, status int, name string, data any) {
	var buf bytes.Buffer
	if err := pageTemplates().ExecuteTemplate(&buf, name, data); err != nil {
		http.Error(w, "The dashboard could not render this view.", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		w.Write(buf.Bytes())
	}
}

// renderNotice renders a one-line notice with status.
func (o *observer) renderNotice(w http.ResponseWriter, r *http.Request, status int, isError bool, text string) {
	o.renderPage(w, r, status, "notice", struct {
		Error bool
		Text  string
	}{isError, text})
}

// stamp is a stored timestamp prepared for display: ISO for the browser to
// re-render in the viewer's zone, Text as a server-side fallback.
type stamp struct {
	ISO, Text string
}

// parseStamp reads the ISO 8601 timestamps writers store, ignoring
// surrounding space.
func parseStamp(raw string) (time.Time, bool) {
	t, err := pyFromISOFormat(strings.TrimSpace(raw))
	return t, err == nil
}

// stampOf formats raw for display, with empty standing in for no value.
func (o *observer) stampOf(raw, empty string) stamp {
	t, ok := parseStamp(raw)
	if !ok {
		if strings.TrimSpace(raw) == "" {
			return stamp{Text: empty}
		}
		return stamp{Text: raw}
	}
	return stamp{ISO: t.UTC().Format(time.RFC3339Nano), Text: t.In(o.location).Format("2006-01-02 15:04:05 MST (-0700)")}
}

// successLabel and unknownErrorLabel name the outcomes that are not one of
// the tool layer's error categories.
const (
	successLabel      = "Success"
	unknownErrorLabel = "Unknown Error"
)

// errorCategories names and colours (reds and ambers, beside successColor)
// the tool layer's failure categories that audit rows store.
var errorCategories = []struct{ Key, Label, Color string }{
	{categoryValidation, "Validation Error", "#c0504d"},
	{categoryNotFound, "Not Found Error", "#c9822b"},
	{categoryAuthorization, "Authorization Error", "#a6466f"},
	{categoryBusy, "Database Busy Error", "#b8a03a"},
	{categoryInternal, "Internal Error", "#e06666"},
}

// errorCategoryLabel names a stored error category.
func errorCategoryLabel(category string) string {
	for _, c := range errorCategories {
		if c.Key == category {
			return c.Label
		}
	}
	return unknownErrorLabel
}

// outcomeLabel names an audit row's outcome: success, or its error category.
func outcomeLabel(outcome, category string) string {
	if outcome == "success" {
		return successLabel
	}
	return errorCategoryLabel(category)
}

// toolLabel makes a snake_case tool name readable: "send_message" → "Send Message".
func toolLabel(name string) string {
	parts := strings.Split(cmp.Or(name, "tool"), "_")
	for i, p := range parts {
		if p != "" {
			parts[i] = strings.ToUpper(p[:1]) + p[1:]
		}
	}
	return strings.Join(parts, " ")
}

// percentText renders a ratio as "12.5%".
func percentText(part, total int64) string {
	if total == 0 {
		return "0.0%"
	}
	return fmt.Sprintf("%.1f%%", float64(part)*100/float64(total))
}

// firstNonEmpty returns the first value that is not blank, else "".
func firstNonEmpty(values ...string) string {
	for _, v := range values {
		if strings.TrimSpace(v) != "" {
			return v
		}
	}
	return ""
}

// formatDuration renders seconds the way a person reads them, to the two
// largest units: "45 s", "3 m 20 s", "7 h 36 m", "2 d 5 h", "1 m".
func formatDuration(seconds float64) string {
	total := max(int64(math.Round(seconds)), 0)
	units := []struct {
		name string
		size int64
	}{{"d", 86400}, {"h", 3600}, {"m", 60}, {"s", 1}}
	for i, u := range units[:3] {
		if total >= u.size {
			next := units[i+1]
			if rest := total % u.size / next.size; rest > 0 {
				return fmt.Sprintf("%d %s %d %s", total/u.size, u.name, rest, next.name)
			}
			return fmt.Sprintf("%d %s", total/u.size, u.name)
		}
	}
	return fmt.Sprintf("%d s", total)
}

// formatBytes renders a size as the original does: "80.0 KiB".
func formatBytes(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, unit := float64(n)/1024, "KiB"
	for _, next := range []string{"MiB", "GiB"} {
		if v >= 1024 {
			v, unit = v/1024, next
		}
	}
	return fmt.Sprintf("%.1f %s", v, unit)
}

// loopbackOnly refuses requests whose Host header does not name the
// loopback interface, which may come from a page that rebound its DNS name
// to 127.0.0.1. It refuses absolute-form request lines too: net/http then
// drops the Host header, and browsers send that form only to proxies.
func loopbackOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Host != "" || !allowedHost(r.Host) {
			http.Error(w, "Forbidden: this server only answers loopback host names.", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// allowedHost reports whether a Host (or Origin host) names this machine's
// loopback interface; anything else may be a DNS-rebinding page.
func allowedHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return slices.Contains([]string{"127.0.0.1", "localhost", "::1"}, strings.ToLower(host))
}

// contentSecurityPolicy allows only this origin: no inline script or style,
// no third-party connection, no framing.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; worker-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; " +
	"form-action 'self'; frame-ancestors 'none'"

// securityHeaders sets the headers every response carries, errors included.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		next.ServeHTTP(w, r)
	})
}

// requireCSRF lets a POST through only with this process's CSRF token and
// no origin but a loopback one: "Origin: null" (sandboxed frames, data: URLs,
// some redirects) is refused even with the token, as such a page is anyone's.
func (o *observer) requireCSRF(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if origin := r.Header.Get("Origin"); origin != "" && !loopbackOrigin(origin) {
			o.renderNotice(w, r, http.StatusForbidden, true, "Maintenance request rejected: cross-origin request.")
			return
		}
		token := r.Header.Get("X-CSRF-Token")
		if token == "" || subtle.ConstantTimeCompare([]byte(token), []byte(o.csrfToken)) != 1 {
			o.renderNotice(w, r, http.StatusForbidden, true, "Maintenance request rejected: invalid CSRF token.")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// loopbackOrigin reports whether an Origin header value is an http(s)
// origin on a loopback host name.
func loopbackOrigin(origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	return allowedHost(u.Host)
}
