// Validates an OpenAPI document with @apidevtools/swagger-parser: the
// document against the OpenAPI Initiative's JSON Schema of its version (3.1
// here) and every $ref resolved. Prints "valid: FILE" and exits 0, or the
// validator's messages and exits 1.
//   node tests/contract/validate.mjs proto/openapi.yaml
import SwaggerParser from "@apidevtools/swagger-parser";

const file = process.argv[2];
if (!file) {
  console.error("usage: node validate.mjs OPENAPI_FILE");
  process.exit(2);
}
try {
  const api = await SwaggerParser.validate(file);
  console.log(`valid: ${file} (OpenAPI ${api.openapi}, ${Object.keys(api.paths ?? {}).length} paths)`);
} catch (err) {
  console.error(`invalid: ${file}`);
  console.error(err.message);
  process.exit(1);
}
