"""Retrievers for LLM frameworks over `Client` and `AsyncClient`: an index embedded in this
process or a running server, asked with `retrieve` (no generation), each ranked chunk handed
over with its provenance (doc id, path, section, page, char span, score, file version).

    base        what both retrievers share, no framework imported: the connection (a client
                given, or one opened from a data dir or a URL) and each chunk's metadata
    langchain   `RagstreamRetriever`, a LangChain `BaseRetriever` of `Document`s
                (`pip install 'ragstream[langchain]'`)
    llamaindex  `RagstreamRetriever`, a LlamaIndex `BaseRetriever` of `NodeWithScore`s
                (`pip install 'ragstream[llamaindex]'`)

Each framework module imports its framework when it is imported; `import ragstream` imports
neither (docs/guide/frameworks.md).
"""
