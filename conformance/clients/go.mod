module crosstalk-mcp/conformance/clients

go 1.26.8
