ALTER FUNCTION hermes_json_text(text, text) PARALLEL SAFE;
ALTER FUNCTION hermes_json_array_length(text) PARALLEL SAFE;
