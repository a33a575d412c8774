-- The dedup key definition each source's event ids were made under (docs/providers.md, dedup keys).
CREATE TABLE "source_dedup_keys" (
	"source" text PRIMARY KEY NOT NULL,
	"version" integer NOT NULL,
	"definition" jsonb NOT NULL,
	"recorded_at" timestamp (3) with time zone DEFAULT now() NOT NULL
);
