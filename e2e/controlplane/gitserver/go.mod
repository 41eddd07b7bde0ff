module llmscaler.local/gitserver

go 1.26.0

require github.com/fluxcd/gitkit v0.6.0

require (
	github.com/gofrs/uuid v4.2.0+incompatible // indirect
	golang.org/x/crypto v0.0.0-20220427172511-eb4f295cb31f // indirect
	golang.org/x/sys v0.0.0-20211216021012-1d35b9e2eb4e // indirect
)
