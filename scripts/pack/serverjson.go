package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// serverJSON is the part of the registry's server.json (schema 2025-12-11)
// that crosstalk-mcp publishes. Decoding refuses any other field, so a field
// added to server.json by hand is not silently dropped when a release
// rewrites the file: it has to be added here first.
type serverJSON struct {
	Schema      string            `json:"$schema"`
	Name        string            `json:"name"`
	Title       string            `json:"title,omitempty"`
	Description string            `json:"description"`
	Version     string            `json:"version"`
	WebsiteURL  string            `json:"websiteUrl,omitempty"`
	Repository  json.RawMessage   `json:"repository,omitempty"`
	Packages    []registryPackage `json:"packages,omitempty"`
	Remotes     []json.RawMessage `json:"remotes,omitempty"`
}

// registryPackage is one entry of server.json's packages.
type registryPackage struct {
	RegistryType string          `json:"registryType"`
	Identifier   string          `json:"identifier"`
	Version      string          `json:"version,omitempty"`
	FileSHA256   string          `json:"fileSha256,omitempty"`
	Transport    json.RawMessage `json:"transport"`
}

// releaseDownload is the part of a GitHub release asset's URL before the tag.
const releaseDownload = "/releases/download/"

// runServerJSON writes server.json for a release: the template's version,
// and each mcpb package's identifier and fileSha256, set for the bundles in
// the dist directory.
func runServerJSON(args []string) error {
	fs := flag.NewFlagSet("serverjson", flag.ContinueOnError)
	tmpl := fs.String("template", "", "server.json to start from")
	version := fs.String("version", "", "release version")
	dist := fs.String("dist", "", "directory holding the bundles")
	out := fs.String("o", "", "server.json to write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	text, err := os.ReadFile(*tmpl)
	if err != nil {
		return fmt.Errorf("read server.json template: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.DisallowUnknownFields()
	var doc serverJSON
	if err := dec.Decode(&doc); err != nil {
		return fmt.Errorf("decode server.json template: %w", err)
	}
	doc.Version = *version
	for i := range doc.Packages {
		if err := fillBundle(&doc.Packages[i], *version, *dist); err != nil {
			return err
		}
	}
	return writeFile(*out, func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		return enc.Encode(doc)
	})
}

// fillBundle points an mcpb package at this version's release asset for the
// same platform and records the bundle's checksum. Other package types are
// left as they are.
func fillBundle(p *registryPackage, version, dist string) error {
	if p.RegistryType != "mcpb" {
		return nil
	}
	base, asset, ok := strings.Cut(p.Identifier, releaseDownload)
	if !ok {
		return fmt.Errorf("mcpb identifier %s is not a release download URL", p.Identifier)
	}
	_, file, _ := strings.Cut(asset, "/")
	fields := strings.Split(strings.TrimSuffix(file, ".mcpb"), "-")
	if len(fields) < 3 || !strings.HasSuffix(file, ".mcpb") {
		return fmt.Errorf("mcpb identifier %s does not end in NAME-VERSION-OS-ARCH.mcpb", p.Identifier)
	}
	name := fmt.Sprintf("crosstalk-mcp-%s-%s-%s.mcpb", version, fields[len(fields)-2], fields[len(fields)-1])
	sum, err := fileSHA256(filepath.Join(dist, name))
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("server.json lists %s, which the release did not build", name)
	}
	if err != nil {
		return err
	}
	p.Identifier = base + releaseDownload + "v" + version + "/" + name
	p.Version = version
	p.FileSHA256 = sum
	return nil
}
