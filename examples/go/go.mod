module memra.example/generate

go 1.19
