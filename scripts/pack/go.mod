module github.com/crosstalk/crosstalk-mcp/scripts/pack

go 1.26.8
