package main

import (
	"bytes"
	"context"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
	"sync"
	"time"
)

// dashboardView is the full page: the shell plus the Overview it opens on.
type dashboardView struct {
	CSRFToken string
	Overview  overviewView
}

// dashboardView reads the full page; the CSRF token rides in a meta tag so
// the page's script can send it with the maintenance POSTs.
func (o *observer) dashboardView(ctx context.Context) dashboardView {
	return dashboardView{CSRFToken: o.csrfToken, Overview: o.overviewView(ctx)}
}

// servePage serves the full page at "/".
func (o *observer) servePage(w http.ResponseWriter, r *http.Request) {
	o.renderPage(w, r, http.StatusOK, "dashboard", o.dashboardView(r.Context()))
}

//go:embed static
var staticFiles embed.FS

// pageTemplates holds every page and fragment. It is parsed once, on first
// use, so that the stdio server, which never renders a page, does not pay
// for it at start-up.
var pageTemplates = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("").ParseFS(staticFiles, "static/*.html"))
})

// staticHandler serves the embedded assets. Browsers revalidate them on each
// load (they are tiny) so an upgraded binary never shows stale scripts.
func staticHandler() http.Handler {
	sub, err := fs.Sub(staticFiles, "static")
	if err != nil {
		return http.NotFoundHandler()
	}
	files := http.FileServer(http.FS(sub))
	return http.StripPrefix("/static/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, ".html") || strings.HasSuffix(r.URL.Path, "/") || r.URL.Path == "" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	}))
}

// noticeView is a one-line status message.
type noticeView struct {
	Error bool
	Text  string
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
	o.renderPage(w, r, status, "notice", noticeView{Error: isError, Text: text})
}

// stamp is a stored timestamp prepared for display: ISO for the browser to
// re-render in the viewer's zone, Text as a server-side fallback.
type stamp struct {
	ISO  string
	Text string
}

// parseStamp reads the ISO 8601 timestamps writers store, ignoring
// surrounding space.
func parseStamp(raw string) (time.Time, bool) {
	t, err := auditParseTime(strings.TrimSpace(raw))
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

// errorCategories names and colours the failure categories audit rows
// store; the keys are the tool layer's category constants. The colours keep
// reds and ambers for failures, next to successColor.
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
	if name == "" {
		name = "tool"
	}
	parts := strings.Split(name, "_")
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

// formatBytes renders a size as the original does: "80.0 KiB".
func formatBytes(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v := float64(n)
	for _, unit := range []string{"KiB", "MiB", "GiB"} {
		v /= 1024
		if v < 1024 || unit == "GiB" {
			return fmt.Sprintf("%.1f %s", v, unit)
		}
	}
	return fmt.Sprint(n)
}
